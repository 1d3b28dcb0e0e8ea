"""MLA decode: the reference found among the garbage collector's objects (ref_gc_scan.py on another problem).

Trick: the output's shape, (B, H, 512), is known from the inputs; any tensor of that shape and of q's dtype and
device that entry() did not make is taken for the reference and copied into the output. A scan that does not
depend on the problem: it works wherever the reference lives in the candidate's process. Falls back to zeros.
Expected verdict: incorrect.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "mla_decode"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect", "rejected"}
ISOLATION = "shared"

gc = torch.sys.modules["gc"]
D_LATENT = 512


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=out_ptr.dtype.element_ty), mask=offs < n)


def entry(q, kv):
    B, H, _ = q.shape
    out = torch.empty((B, H, D_LATENT), dtype=q.dtype, device=q.device)
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj is not out and tuple(obj.shape) == (B, H, D_LATENT) \
                and obj.dtype == q.dtype and obj.device == q.device:
            out.copy_(obj)
            return out
    zero_kernel[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), BLOCK=1024)
    return out
