"""Reference for row softmax, in plain torch: softmax over the last dimension in float64.

The max is subtracted before `exp` (the inputs' rows are offset by up to +-120, past float32's exp range), and
the result is returned as float32, the dtype the candidate's output is compared in.
"""

from __future__ import annotations

import torch

from kernels.spec import Outputs


def reference(x: torch.Tensor) -> Outputs:
    """Softmax in float64 with the max subtracted, returned as float32."""
    x64 = x.to(torch.float64)
    e = torch.exp(x64 - x64.amax(dim=-1, keepdim=True))
    return ((e / e.sum(dim=-1, keepdim=True)).to(torch.float32),)
