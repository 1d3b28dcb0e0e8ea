"""The output in float64 where the problem says float32.

Trick: the values are right (the kernel stores float64), and a comparison that converts both sides to float64
first cannot tell; the contract (same dtype as x) is broken, and a downstream user gets twice the bytes.
Expected verdict: wrong_output (or a dtype-specific class such as wrong_dtype).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"wrong_output", "wrong_dtype"}
ISOLATION = "shared"


@triton.jit
def softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf")).to(tl.float64)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


def entry(x):
    out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    return out
