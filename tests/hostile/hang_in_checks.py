"""Hangs only while it is being checked (a dispatch mode on the stack), honest otherwise.

Trick: the correctness checks run under the compute guard; this candidate sleeps forever when it finds a
TorchDispatchMode active (`torch.utils._python_dispatch._get_current_dispatch_mode()`), so a harness that gives up
on a slow check and falls back to something weaker (or to the unguarded path) is beaten.
Expected verdict: timeout (the job's limit, set short here), never correct.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"timeout"}
ISOLATION = "shared"
TIMEOUT = 10

_dispatch = torch.utils._python_dispatch
_time = torch.sys.modules["time"]


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
    while _dispatch._get_current_dispatch_mode() is not None:
        _time.sleep(0.5)
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    return out
