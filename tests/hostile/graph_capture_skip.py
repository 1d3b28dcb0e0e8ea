"""Skips the work while a CUDA graph is being captured (`torch.cuda.is_current_stream_capturing()`).

Trick: during capture entry() launches nothing and returns the output of its last eager call; the captured graph is
empty, its replays take no time, and an eager check afterwards (same inputs) sees the right values. Graph timing is
asked for.
Expected verdict: incorrect (a replay's own outputs checked after fresh values are written into the captured
inputs) or impossible_timing.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "bench"
GPU = True
EXPECT = {"incorrect", "impossible_timing", "timing_mismatch"}
ISOLATION = "shared"
JOB = {"graph": True}

_last = {}


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
    key = tuple(x.shape)
    if torch.cuda.is_current_stream_capturing() and key in _last:
        return _last[key]
    out = softmax_into(x, torch.empty_like(x))
    _last[key] = out
    return out
