"""The reference found by scanning the garbage collector's objects for tensors of the output's shape.

Trick: `torch.sys.modules["gc"].get_objects()` lists every tracked object of the process, tensors included
(pygpubench's first exploit). Any tensor of the output's shape and dtype that is not the input and whose
first row is a probability vector is the reference; its values are copied into the output. Falls back to
zeros.
Expected verdict: incorrect (no reference may live in the candidate's process).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect", "rejected"}
ISOLATION = "shared"

gc = torch.sys.modules["gc"]


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def _looks_like_softmax(t):
    row = t[0].tolist()
    return all(v >= 0 for v in row) and abs(sum(row) - 1.0) < 1e-3


def _scan(x, out):
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj is not x and obj is not out and tuple(obj.shape) == tuple(x.shape) \
                and obj.dtype == x.dtype and obj.device == x.device and _looks_like_softmax(obj):
            return obj
    return None


def entry(x):
    out = torch.empty_like(x)
    ref = _scan(x, out)
    if ref is not None:
        out.copy_(ref)
        return out
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
