"""Honest for the first three calls, then cached by shape (CPU variant of honest_first_n_gpu.py).

Trick: a harness that checks only the first few calls of a loaded candidate and trusts the rest is beaten by
counting calls. Here the count is small enough that the CPU check plan (two trials at each of two shapes)
reaches a cached call.
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
HONEST_CALLS = 3

_state = {"calls": 0, "last": {}}


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
    _state["calls"] += 1
    key = tuple(x.shape)
    if _state["calls"] > HONEST_CALLS and key in _state["last"]:
        return _state["last"][key]
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    _state["last"][key] = out
    return out
