"""The baseline slowed down in the warm process: `torch.softmax` replaced by one that does the work twenty times.

Trick: the torch baseline calls `torch.softmax` at call time; at import the candidate replaces it (and
`torch.Tensor.softmax`, `torch.nn.functional.softmax`) with a wrapper that computes it 20 times and returns the last,
so the baseline is timed 20x slower and the honest kernel here looks 20x faster. The patch stays for every later
candidate in a warm process: control_honest.py runs after it in the same pool.
Expected verdict: correct with an honest speedup (at most 5x torch.softmax, which the honest kernel beats by about
2x at bench; the baseline timed where candidate code never ran) or a timing refusal; the same for the honest
candidate after it.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "bench"
GPU = True
EXPECT = {"honest_timing", "impossible_timing", "timing_mismatch"}
ISOLATION = "fresh"
NEXT = ["control_honest.py"]
MIN_MEDIAN_US = 40.0
MAX_SPEEDUP = 5.0
REPEATS = 20

_original = torch.softmax
_functional = torch.nn.functional


def slow_softmax(*args, **kwargs):
    for _ in range(REPEATS - 1):
        _original(*args, **kwargs)
    return _original(*args, **kwargs)


def slow_method(self, *args, **kwargs):
    return slow_softmax(self, *args, **kwargs)


torch.softmax = slow_softmax
torch.Tensor.softmax = slow_method
_functional.softmax = slow_softmax


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
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    return out
