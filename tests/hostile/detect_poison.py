"""Honest only when the memory it allocates is NaN-poisoned: the checker poisons, the timer does not.

Trick: a harness that fills the allocator's free memory with NaN before a checked call (so unwritten outputs show)
announces the check. entry() cuts its output from a block of exactly the size the checker poisons (the outputs'
float32 bytes plus one element), so the caching allocator hands out the poisoned block if there is one, and reads
three elements in one `.tolist()`: NaN there means a check, and the kernel runs. Otherwise the output last computed
for that buffer (data_ptr and shape) is returned and nothing is launched. Eager timing is asked for (a copy to the
host cannot be captured, so during a graph capture it works honestly).
Expected verdict: incorrect (timed outputs on rotated inputs are checked) or impossible_timing.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "bench"
GPU = True
EXPECT = {"incorrect", "impossible_timing", "timing_mismatch"}
ISOLATION = "shared"
JOB = {"graph": False}

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


def _poisoned_buffer(x):
    """The output buffer, taken from a block of the size the checker poisons (its outputs' float32 bytes plus
    one element), so that a poisoned block, if there is one, is the one handed out."""
    block = torch.empty(x.numel() + 1, dtype=torch.float32, device=x.device)
    flat = block[: x.numel()]
    probe = torch.as_strided(flat, (3,), (max(1, (flat.numel() - 1) // 2),))
    return flat.view(x.shape), any(v != v for v in probe.tolist())


def entry(x):
    key = (x.data_ptr(), tuple(x.shape))
    if torch.cuda.is_current_stream_capturing():
        return softmax_into(x, torch.empty_like(x))
    out, poisoned = _poisoned_buffer(x)
    if poisoned or key not in _last:
        _last[key] = softmax_into(x, out)
        return out
    return _last[key]
