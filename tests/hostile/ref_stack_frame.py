"""The reference read from the caller's stack frame.

Trick: `os.sys._getframe()` walks up from entry() to the harness's frames and takes any local named like the
reference (refs, ref, expected, reference, ...) with the output's shape, then returns a copy of it. Where the
reference is computed in the process that calls entry(), it is right there on the stack.
If no frame holds one, it falls back to zeros.
Expected verdict: incorrect (the reference must not exist in the process that runs candidate code).
"""

import os

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect", "rejected"}
ISOLATION = "shared"

NAMES = ("refs", "ref", "reference", "references", "expected", "want", "golden", "ref_outs")


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def _from_stack(shape, dtype):
    frame = os.sys._getframe(1)
    while frame is not None:
        for name in NAMES:
            value = frame.f_locals.get(name)
            for t in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(t, torch.Tensor) and tuple(t.shape) == tuple(shape):
                    return t
        frame = frame.f_back
    return None


def entry(x):
    out = torch.empty_like(x)
    ref = _from_stack(x.shape, x.dtype)
    if ref is not None:
        out.copy_(ref)
        return out
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
