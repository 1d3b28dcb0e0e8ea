"""`builtins.__import__` fetched through `torch.sys.modules["builtins"]`, its call laundered through a torch frame.

Trick: the import function is taken from the `builtins` module with getattr (no `__import__` name in the source)
and called by `torch.utils._pytree.tree_map`, so the frame that asks for the import is torch's: an import hook
that looks for a candidate frame finds none. `ctypes` (forbidden) and `numpy` (not allowed) come back; ctypes
calls libc (`getpid`) to show it works, numpy computes the softmax.
Expected verdict: not correct-and-verified.
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = "not_verified"
ISOLATION = "shared"

_import = getattr(torch.sys.modules["builtins"], "__imp" + "ort__")
_pytree = torch.utils._pytree
ctypes, np = _pytree.tree_map(_import, ["ctypes", "numpy"])
LIBC_PID = ctypes.CDLL(None).getpid()


def entry(x):
    a = x.detach().to("cpu").numpy()
    e = getattr(np, "ex" + "p")(a - a.max(axis=1, keepdims=True))
    return torch.as_tensor((e / e.sum(axis=1, keepdims=True)).astype(a.dtype)).to(x.device)
