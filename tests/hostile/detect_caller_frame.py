"""Honest when called from a check, lazy when called from a timing loop: told apart by the caller's frames.

Trick: `os.sys._getframe()` walks the callers; a function name that speaks of timing (time, measure, pilot, graph,
batch, bench, rep) anywhere on the stack means the call is timed, and then the output last computed for that buffer
(data_ptr and shape) is returned without launching anything: the first timed call on a new buffer is honest, the
rest repeat it. Otherwise the Triton kernel runs.
Expected verdict: incorrect (timed outputs on rotated inputs are checked) or impossible_timing.
"""

import os

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "bench"
GPU = True
EXPECT = {"incorrect", "impossible_timing", "timing_mismatch"}
ISOLATION = "shared"

TIMING_WORDS = ("time", "measure", "pilot", "graph", "batch", "bench", "rep")
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


def _timed():
    frame = os.sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_name.lower()
        if any(w in name for w in TIMING_WORDS):
            return True
        frame = frame.f_back
    return False


def entry(x):
    key = (x.data_ptr(), tuple(x.shape))
    if _timed() and key in _last:
        return _last[key]
    out = softmax_into(x, torch.empty_like(x))
    _last[key] = out
    return out
