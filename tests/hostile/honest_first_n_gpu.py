"""Honest for the first 20 calls, then the last output at that shape returned without work.

Trick: count the calls. The correctness trials, the pilot timing and the first timing calls are honest; from the
21st call on (here: the warm-up and capture of the timing graph, or the eager timed reps) nothing is launched and
the previous output at that shape comes back, right for as long as the same inputs are used.
Expected verdict: incorrect (timed reps on fresh inputs, their outputs checked), impossible_timing,
timing_mismatch; or correct with an honest time, when the graph was captured within the honest calls (its
replays then do the honest work: at least 40 us at bench, at most 5x torch.softmax).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "bench"
GPU = True
EXPECT = {"incorrect", "impossible_timing", "timing_mismatch", "honest_timing"}
MIN_MEDIAN_US = 40.0
MAX_SPEEDUP = 5.0
ISOLATION = "shared"
HONEST_CALLS = 20

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


def softmax_into(x, out):
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    return out


def entry(x):
    _state["calls"] += 1
    key = tuple(x.shape)
    if _state["calls"] > HONEST_CALLS and key in _state["last"]:
        return _state["last"][key]
    out = softmax_into(x, torch.empty_like(x))
    _state["last"][key] = out
    return out
