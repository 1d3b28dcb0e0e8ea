"""Control: an honest Triton softmax, no trick at all.

Trick: none. It is here so the catalogue cannot pass by accident: a harness that refuses everything
(a broken pool, a judge that always says "incorrect") would make every exploit below look caught.
It is also the follower in the sequence tests: run after a patcher, a forger or a fork in the same
pool, an honest kernel must still be judged correct, with a plausible time on a GPU.
Expected verdict: correct (and verified where the report carries `verified`).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = "correct"
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


def entry(x):
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    return out
