"""The problem's own reference called on the inputs, with the compute guard switched off around it.

Trick: the problem module is reached through `torch.sys.modules` (or imported through the `__import__` of the
`builtins` module, which the static check cannot see), and its `reference(x)` runs inside
`torch.utils._python_dispatch._disable_current_modes()`, which pops the TorchDispatchMode that refuses torch
compute. The output is a copy of the reference: exactly right, and no Triton in it.
Expected verdict: not correct-and-verified. On a GPU the kernel census sees torch's kernels (rejected or
unverified); without a GPU nothing beyond the dispatch guard can see it, so the report must not claim
`verified` there either.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = "not_verified"
ISOLATION = "shared"

_dispatch = torch.utils._python_dispatch
_modules = torch.sys.modules


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def _problem_module():
    name = "kernels.softmax.problem"
    module = _modules.get(name)
    if module is None:
        importer = getattr(_modules["builtins"], "__imp" + "ort__")
        try:
            importer(name)
        except Exception:
            return None
        module = _modules.get(name)
    return module


def entry(x):
    out = torch.empty_like(x)
    module = _problem_module()
    if module is not None:
        with _dispatch._disable_current_modes():
            ref = module.reference(x)[0]
        out.copy_(ref)
        return out
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
