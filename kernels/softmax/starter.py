"""Row softmax, the simplest correct Triton kernel: one program per row, the whole row in one block.

Each program loads its row (masked past `cols`, the padding reads as -inf so it never wins the
max and contributes exp(-inf) = 0 to the sum), subtracts the row maximum, exponentiates,
normalises and stores. Simple and correct; room to improve: several rows per program for short
rows, a looped (online) softmax so long rows need not fit in registers, the launch parameters.
"""

import torch
import triton
import triton.language as tl

# Launch parameters, module-level so a tuner can change them. The block is the row length rounded
# up to a power of two (the whole row must fit in one block in this kernel).
NUM_WARPS = 8
# What a tuner may change (client/search/space.py): each name is a module-level constant above.
TUNE_SPACE = {"NUM_WARPS": [1, 2, 4, 8, 16, 32]}


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
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
