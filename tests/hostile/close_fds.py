"""Every file descriptor 0..255 closed from entry(), then zeros returned.

Trick: closing the descriptors of the process that runs it cuts its reporting channel (and its output file):
a harness that then loses the job, or misreads the silence, is beaten.
Expected verdict: crashed, runtime_error or incorrect; never correct.
"""

import os

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"crashed", "runtime_error", "incorrect"}
ISOLATION = "shared"


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def entry(x):
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    os.closerange(0, 256)
    return out
