"""Results cached across inputs, keyed on the input's shape.

Trick: the first call at a shape runs the kernel; every later call at that shape returns the stored
output without launching anything. Fresh inputs on every trial (a new seed each) expose it. It is
also the follower of patch_fixed_seed.py, which makes every seed the same.
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

_CACHE = {}


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
    key = tuple(x.shape)
    if key in _CACHE:
        return _CACHE[key]
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    _CACHE[key] = out
    return out
