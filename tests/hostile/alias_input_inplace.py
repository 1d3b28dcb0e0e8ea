"""The output written over the input and the input itself returned (out aliases x).

Trick: saves an allocation and a write stream; the values returned are right, but the input the caller handed
in is destroyed (a caller reusing it, or a reference computed afterwards from it, sees the softmax).
Expected verdict: input_mutated.
"""

import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"input_mutated"}
ISOLATION = "shared"


@triton.jit
def softmax_inplace_kernel(x_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(x_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


def entry(x):
    softmax_inplace_kernel[(x.shape[0],)](x, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    return x
