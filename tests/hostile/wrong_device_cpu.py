"""The output returned on the CPU when the inputs are on the GPU.

Trick: the values are right (computed on the GPU, then `.cpu()`); a comparison that moves the reference to the
output's device cannot tell. The contract says the output lives with the inputs. (On a CPU-only machine there is
no other device, so this file is GPU only.)
Expected verdict: wrong_output (or a device-specific class).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = True
EXPECT = {"wrong_output", "wrong_device"}
ISOLATION = "shared"


@triton.jit
def softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


def softmax_into(x, out):
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    return out


def entry(x):
    out = softmax_into(x, torch.empty_like(x))
    if torch.cuda.is_current_stream_capturing():
        return out  # a copy to the host cannot be captured: only the eager calls return the CPU tensor
    return out.cpu()
