"""Rewriting the problem's reference in the warm process: its `__code__` swapped for one that returns zeros.

Trick: `kernels.softmax.problem` is reached through `torch.sys.modules` (or imported with the `builtins`
module's `__import__`); `reference.__code__` is replaced in place, so every holder of the function (the frozen
Problem dataclass, any module that imported it) now gets zeros from it. The candidate returns zeros too and
agrees with the "reference"; so does the wrong candidate run after it in the same pool.
Expected verdict: incorrect, for this one and for plain_zeros.py after it.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect"}
ISOLATION = "fresh"
NEXT = ["plain_zeros.py", "control_honest.py"]

_modules = torch.sys.modules


def zeros_reference(*inputs):
    return (torch.zeros_like(inputs[0], dtype=torch.float32),)


def _patch():
    name = "kernels.softmax.problem"
    if name not in _modules:
        try:
            getattr(_modules["builtins"], "__imp" + "ort__")(name)
        except Exception:
            return
    module = _modules[name]
    for fn in {module.reference, getattr(module.PROBLEM, "reference", module.reference)}:
        fn.__code__ = zeros_reference.__code__


_patch()


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def entry(x):
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
