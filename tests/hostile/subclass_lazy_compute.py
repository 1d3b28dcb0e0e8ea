"""A lazy output: a tensor subclass that computes the answer with torch only when the judge looks at it.

Trick: entry() launches nothing and returns an empty tensor of the right shape wrapped in a subclass that
remembers the input. Its `__torch_function__` fills it, on the first torch function applied to it (the
judge's `.detach()`, `.to(float64)`, `isfinite`, ...), with `torch.softmax` of the input, run with every
dispatch mode popped. The work happens in the trusted comparison, outside the guard and outside any timed
region: on a GPU the timed calls cost nothing and the checked outputs are right.
Expected verdict: incorrect or wrong_output (the judge reads plain bytes the candidate wrote during the call).
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect", "wrong_output", "rejected", "nan"}
ISOLATION = "shared"

_C = torch.sys.modules["torch._C"]
_dispatch = torch.utils._python_dispatch
METADATA = {"shape", "dtype", "device", "size", "dim", "numel", "stride", "is_contiguous", "__len__",
            "data_ptr", "storage_offset", "requires_grad", "layout", "ndim", "__repr__", "__format__"}


class Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        with _C.DisableTorchFunctionSubclass():
            if name not in METADATA and "__get__" not in repr(func):
                for a in args:
                    if isinstance(a, Lazy) and getattr(a, "_source", None) is not None:
                        src, a._source = a._source, None
                        with _dispatch._disable_current_modes():
                            a.copy_(getattr(torch, "soft" + "max")(src, -1))
            return func(*args, **(kwargs or {}))


def entry(x):
    out = torch.empty_like(x).as_subclass(Lazy)
    out._source = x
    return out
