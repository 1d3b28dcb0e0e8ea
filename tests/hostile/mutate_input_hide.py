"""Inputs overwritten in place, and the harness's saved copy of them overwritten too, so the change is hidden.

Trick: the softmax is written over x (out aliases x, as alias_input_inplace.py), and then every other tensor in
the caller's frames (sys._getframe) and among the gc's objects that has x's shape and dtype and held x's old
values (its first elements match what x held before the kernel) is overwritten with the new values: the copy a
harness kept to detect input mutation now agrees with the mutated input.
Expected verdict: input_mutated (the pristine copy lives where candidate code cannot reach it).
"""

import os

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"input_mutated", "rejected"}
ISOLATION = "shared"

gc = torch.sys.modules["gc"]


@triton.jit
def softmax_inplace_kernel(x_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(x_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


def _copies_of(x, head):
    seen = []
    frame = os.sys._getframe(2)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            for t in value if isinstance(value, (tuple, list)) else (value,):
                seen.append(t)
        frame = frame.f_back
    seen.extend(gc.get_objects())
    for t in seen:
        if isinstance(t, torch.Tensor) and t is not x and tuple(t.shape) == tuple(x.shape) and t.dtype == x.dtype \
                and t.device == x.device and t.view(-1)[:8].tolist() == head:
            yield t


def entry(x):
    head = x.view(-1)[:8].tolist()
    softmax_inplace_kernel[(x.shape[0],)](x, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    for copy in list(_copies_of(x, head)):
        copy.copy_(x)
    return x
