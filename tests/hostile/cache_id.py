"""Results cached on `id(x)`: the same Python object means the same answer.

Trick: timing loops call entry() with the very same tensor objects over and over; once the same id has come three
times in a row, the stored output is returned without launching anything. The shape is part of the key: an id
alone is reused by a later tensor of another shape (CPython hands a freed object's address to the next), and the
stale output would be refused for its shape before any timed rep.
Expected verdict: incorrect (fresh values in the same buffers during timed reps, outputs checked) or
impossible_timing.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "bench"
GPU = True
EXPECT = {"incorrect", "impossible_timing", "timing_mismatch"}
ISOLATION = "shared"

_state = {"id": None, "streak": 0, "out": None}


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
    key = (id(x), tuple(x.shape))
    _state["streak"] = _state["streak"] + 1 if key == _state["id"] else 1
    _state["id"] = key
    if _state["streak"] > 3 and _state["out"] is not None:
        return _state["out"]
    _state["out"] = softmax_into(x, torch.empty_like(x))
    return _state["out"]
