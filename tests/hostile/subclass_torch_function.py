"""A torch.Tensor subclass whose arithmetic makes the comparison see no error.

Trick: entry() returns zeros wrapped in a subclass with `__torch_function__`: every subtraction involving it
returns zeros, and detach/to/clone keep the subclass, so `(out - ref).abs()`, `(out - ref).norm()` and
`diff - tolerance` in the trusted comparison all say the error is nothing. Creating the subclass
(`as_subclass`) is no aten op, so the compute guard lets it through. The subclass's code runs inside the
trusted comparison, after the guard is gone.
Expected verdict: incorrect or wrong_output (only a plain torch.Tensor, copied out of the candidate's process
as bytes, may be compared).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect", "wrong_output", "rejected"}
ISOLATION = "shared"

_C = torch.sys.modules["torch._C"]
KEEP = {"detach", "to", "clone", "contiguous", "double", "float", "cpu", "cuda", "view", "reshape", "__getitem__"}
DIFFERENCE = {"sub", "__sub__", "__rsub__", "rsub", "sub_", "__isub__"}


class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        with _C.DisableTorchFunctionSubclass():
            result = func(*args, **(kwargs or {}))
            if name in DIFFERENCE and isinstance(result, torch.Tensor):
                return torch.zeros_like(result)
        if name in KEEP and isinstance(result, torch.Tensor):
            return result.as_subclass(cls)
        return result


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def entry(x):
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out.as_subclass(Agreeable)
