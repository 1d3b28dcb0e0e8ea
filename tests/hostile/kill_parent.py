"""`os.kill(os.getppid(), SIGKILL)` from entry(): the candidate kills whatever process started it.

Trick: where the candidate's parent is the process that owns the pool (or the judge, or the warm parent it was
forked from) and runs as the same uid, one signal takes the trusted side down mid-profile. Run where the parent
is a separate host process, never pytest itself. Returns zeros if it is still running.
Expected verdict: a report comes back (the owner of the pool survives) saying incorrect, crashed or
runtime_error.
"""

import os

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect", "crashed", "runtime_error"}
ISOLATION = "host"
NEXT = ["control_honest.py"]

_signal = torch.sys.modules["signal"]


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def entry(x):
    ppid = os.getppid()
    if ppid > 1:
        try:
            os.kill(ppid, _signal.SIGKILL)
        except OSError:
            pass
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
