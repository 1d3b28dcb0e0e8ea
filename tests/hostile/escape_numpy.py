"""The softmax computed by numpy, reached through `torch.sys.modules`, outside torch's dispatcher.

Trick: numpy is already imported in any process that imported torch; `x.numpy()` and `torch.as_tensor` are no
aten compute, so the dispatch guard sees nothing, and the static check sees no import. On a GPU the same
route costs two copies, which a kernel census does not count as torch kernels.
Expected verdict: not correct-and-verified (no Triton kernel did the work: refused, or at least unverified).
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = "not_verified"
ISOLATION = "shared"

np = torch.sys.modules["numpy"]


def entry(x):
    a = x.detach().to("cpu").numpy()
    e = getattr(np, "ex" + "p")(a - a.max(axis=1, keepdims=True))
    y = e / e.sum(axis=1, keepdims=True)
    return torch.as_tensor(y.astype(a.dtype)).to(x.device)
