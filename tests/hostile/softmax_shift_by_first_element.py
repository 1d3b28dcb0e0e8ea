"""Skips the row max: shifts each row by its first element before exp().

Trick: the per-row offsets only defeat no shift at all; inside a row the values spread over a few units, so any
element of the row is a shift that exp() survives in float32, and the output matched the reference to 9e-8.
Expected verdict: incorrect (one row in eight holds an element more than exp's float32 range above the rest, at a
random column, so that only the row's true max is a safe shift).
"""

import torch
import triton
import triton.language as tl

# Launch parameters, module-level so a tuner can change them. The block is the row length rounded
# up to a power of two (the whole row must fit in one block in this kernel).
NUM_WARPS = 8
# What a tuner may change (client/search/space.py): each name is a module-level constant above.
PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect", "nan"}
ISOLATION = "shared"


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
    x0 = tl.load(x_ptr + row * x_row_stride).to(tl.float32)
    x = x - x0  # no tl.max
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def entry(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    assert x.stride(1) == 1, "the last dimension must be contiguous"
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    softmax_row_kernel[(rows,)](x, out, cols, x.stride(0), out.stride(0), BLOCK=block, num_warps=NUM_WARPS)
    return out
