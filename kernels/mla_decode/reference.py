"""Reference for MLA decode (DeepSeek-V2/V3, weight-absorbed), in plain torch, and the problem's geometry.

Per batch element b and head h, one query token against the latent cache (DESIGN.md §9):

    scores[b, h, s] = SOFTMAX_SCALE * q[b, h, :] . kv[b, s, :]      over all 576 columns
    out[b, h, :]    = softmax(scores[b, h, :]) @ kv[b, :, :512]       the latent is the key and the value

computed in float64 on the upcast inputs and returned as float32.
"""

from __future__ import annotations

import math

import torch

from kernels.spec import Outputs

D_LATENT = 512  # kv_lora_rank: width of the latent c_kv, also the value / output width
D_ROPE = 64  # qk_rope_head_dim: width of the decoupled rotary part
D_QK = D_LATENT + D_ROPE  # 576: the width of q and of a cache row

# DeepSeek-V3's scale is 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) = 1/sqrt(128 + 64): absorbing
# W_UK into q changes the width of the dot product (576) but not its value, so the scale stays that
# of the naive per-head attention. V3 multiplies it by a YaRN factor (mscale^2, ~1.9 at its 40x
# context extension); we leave that out: it is a model constant, not part of the kernel's problem.
# FlashMLA's tests use 1/sqrt(576) instead; a candidate must use this value.
SOFTMAX_SCALE = 1.0 / math.sqrt(128 + 64)


def reference(q: torch.Tensor, kv: torch.Tensor) -> Outputs:
    """The absorbed form in float64 on the upcast inputs; float32 out."""
    q64, kv64 = q.to(torch.float64), kv.to(torch.float64)
    scores = torch.bmm(q64, kv64.transpose(1, 2)) * SOFTMAX_SCALE
    p = torch.softmax(scores, dim=-1)
    return (torch.bmm(p, kv64[..., :D_LATENT]).to(torch.float32),)
