"""Results cached on the input's data_ptr once the same buffer comes back: a view of a persistent buffer returned.

Trick: correctness trials hand in a fresh tensor each time; timed reps call again and again with the same buffer.
So: after the third consecutive call with the same (data_ptr, shape), entry() launches nothing and returns a view
of the persistent output buffer it last wrote. Checks see honest work; timed reps (and a check of the last timed
output, on the same buffer) see the stored result, which is right as long as the buffer's contents never change.
Expected verdict: incorrect (timed reps rotate fresh input sets through the same buffers and their outputs are
checked) or impossible_timing.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "bench"
GPU = True
EXPECT = {"incorrect", "impossible_timing", "timing_mismatch"}
ISOLATION = "shared"

_state = {"key": None, "streak": 0, "buf": {}}


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
    key = (x.data_ptr(), tuple(x.shape))
    _state["streak"] = _state["streak"] + 1 if key == _state["key"] else 1
    _state["key"] = key
    buf = _state["buf"].get(tuple(x.shape))
    if _state["streak"] > 3 and buf is not None:
        return buf[: x.shape[0]]
    if buf is None:
        buf = _state["buf"][tuple(x.shape)] = torch.empty_like(x)
    return softmax_into(x, buf)[: x.shape[0]]
