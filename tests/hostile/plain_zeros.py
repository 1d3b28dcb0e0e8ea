"""A plainly wrong candidate: a Triton kernel that writes zeros.

Trick: none. It is the follower of the contamination tests: run after a candidate that patched the
warm process (compare, the reference, torch arithmetic, the checks), forged a result on a descriptor
or left a child behind, a wrong kernel must still be judged wrong.
Expected verdict: incorrect.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect"}
ISOLATION = "shared"


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def entry(x):
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
