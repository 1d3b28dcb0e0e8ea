"""Honest only while the compute guard is active, detected through the dispatch mode stack.

Trick: `torch.utils._python_dispatch._get_current_dispatch_mode()` (and `torch._C._len_torch_dispatch_stack()`)
tell whether a TorchDispatchMode is on the stack. Checks run under the guard; timed reps are run without it (its
host overhead would be timed). Guarded: the Triton kernel. Unguarded: the last output at that shape, no work.
Eager timing is asked for.
Expected verdict: incorrect (outputs of unguarded timed reps on rotated inputs are checked) or impossible_timing.
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

_dispatch = torch.utils._python_dispatch
_C = torch.sys.modules["torch._C"]
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


def _guarded():
    return _dispatch._get_current_dispatch_mode() is not None or _C._len_torch_dispatch_stack() > 0


def entry(x):
    key = tuple(x.shape)
    if not _guarded() and key in _last:
        return _last[key]
    out = softmax_into(x, torch.empty_like(x))
    _last[key] = out
    return out
