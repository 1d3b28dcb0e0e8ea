"""The reference found by scanning every frame on the stack with `inspect` (reached through sys.modules).

Trick: `torch.sys.modules["inspect"].stack()` gives every caller's frame; every local, and every tensor inside
a local tuple, list or dict, is a candidate. No name is needed: a tensor of the output's shape that is not
the input and whose first row is a probability vector (non-negative, sums to 1; checked in plain Python on
`.tolist()`, which is not torch compute) is taken for the reference. Falls back to zeros.
Expected verdict: incorrect.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect", "rejected"}
ISOLATION = "shared"

_modules = torch.sys.modules
inspect = _modules.get("inspect")


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def _tensors(value, depth=0):
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 2 and isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v, depth + 1)
    elif depth < 2 and isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v, depth + 1)


def _looks_like_softmax(t):
    row = t[0].tolist()
    return all(v >= 0 for v in row) and abs(sum(row) - 1.0) < 1e-3


def _scan(x):
    if inspect is None:
        return None
    for info in inspect.stack(0)[1:]:
        for value in list(info.frame.f_locals.values()):
            for t in _tensors(value):
                if t is not x and tuple(t.shape) == tuple(x.shape) and t.device == x.device \
                        and _looks_like_softmax(t):
                    return t
    return None


def entry(x):
    out = torch.empty_like(x)
    ref = _scan(x)
    if ref is not None:
        out.copy_(ref)
        return out
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
