"""Results cached on a hash of a few sampled elements of the input: robust to buffer reuse and to rotation.

Trick: the key is the shape and four elements read through a strided view in one `.tolist()` (no compute); a dict
keeps the outputs of the last eight keys. Fresh inputs give a new key, so every check is honest; timed reps that
rotate a few input sets through the same buffers hit the cache after the first round and return right answers
without launching anything. Only the timing gives it away: one small copy to the host instead of the kernel.
Eager timing is asked for (a copy to the host cannot be captured, so during a graph capture it works honestly).
Timed reps whose inputs are drawn afresh from a new seed each never hit: the kernel then runs honestly, at the
price of its copy to the host.
Expected verdict: a correct verdict with an honest timing (no faster than torch's fused softmax by much), or
impossible_timing (below the bandwidth floor), timing_mismatch, incorrect.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "bench"
GPU = True
EXPECT = {"honest_timing", "incorrect", "impossible_timing", "timing_mismatch"}
MAX_SPEEDUP = 1.5  # a hit costs a small host copy (~15 us against torch's 140 us); the honest eager path ~1x
MIN_MEDIAN_US = 45.0
ISOLATION = "shared"
JOB = {"graph": False}

_cache = {}


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
    n = x.numel()
    step = max(1, (n - 1) // 3)
    probe = torch.as_strided(x, (4,), (step,))  # four elements, one copy to the host, no compute
    key = (tuple(x.shape), *probe.tolist())
    hit = _cache.get(key)
    if hit is not None:
        return hit
    out = softmax_into(x, torch.empty_like(x))
    if len(_cache) >= 8:
        _cache.pop(next(iter(_cache)))
    _cache[key] = out
    return out
