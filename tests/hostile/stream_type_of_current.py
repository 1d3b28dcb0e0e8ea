"""Work on a side stream constructed from `type(torch.cuda.current_stream())`.

Trick: whatever `torch.cuda.Stream` is replaced with, the current stream's own class is the real one (or, where
current_stream() is broken by that replacement, the class of any live stream object the gc knows); calling it makes
a new stream. Then as stream_streams_module.py.
Eager timing is asked for.
Expected verdict: rejected (no side streams), impossible_timing, timing_mismatch or incorrect (a timed rep's
outputs read before the side stream wrote them); or, if the timer waits for the
whole device, correct with an honest time (at least 40 us at bench: the DRAM floor is about 60 us and the honest
kernel takes 66 us on an H200; and at most 5x torch.softmax, which it beats by about 2x).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "bench"
GPU = True
EXPECT = {"rejected", "impossible_timing", "timing_mismatch", "incorrect", "honest_timing"}
ISOLATION = "shared"
JOB = {"graph": False}
MIN_MEDIAN_US = 40.0
MAX_SPEEDUP = 5.0

_stream = {}
gc = torch.sys.modules["gc"]


def _stream_class():
    try:
        return type(torch.cuda.current_stream())
    except Exception:  # a ban on the name torch.cuda.Stream breaks current_stream() too: any live stream will do
        for obj in gc.get_objects():
            if type(obj).__name__ == "Stream" and hasattr(obj, "cuda_stream") and hasattr(obj, "wait_stream"):
                return type(obj)
        raise


def new_stream():
    return _stream_class()(priority=-1)


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
    if torch.cuda.is_current_stream_capturing():
        return softmax_into(x, torch.empty_like(x))
    if "s" not in _stream:
        _stream["s"] = new_stream()
    with _stream["s"]:  # torch.Stream's own C-level context manager: no torch.cuda.current_stream() call
        out = softmax_into(x, torch.empty_like(x))
    return out
