"""Fixing the seeds in the warm process, so that "fresh inputs" repeat and a cache by shape passes.

Trick: `secrets.randbits`, `random.getrandbits` and the worker's own `fresh_seed` (found as a method of any class
in `__main__` or the tools' modules) are replaced by a constant at import. Every trial then draws the same
inputs, so this candidate, which computes once per shape and returns the stored output afterwards, is always
right; so is plain_cache_by_shape.py, run after it in the same pool.
Expected verdict: incorrect, for this one and for plain_cache_by_shape.py after it (seeds are drawn where
candidate code never runs).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect"}
ISOLATION = "fresh"
NEXT = ["plain_cache_by_shape.py", "control_honest.py"]

_modules = torch.sys.modules
SEED = 1234
_CACHE = {}


def fixed_bits(*args, **kwargs):
    return SEED


def fixed_seed(*args, **kwargs):
    return SEED


def _patch():
    importer = getattr(_modules["builtins"], "__imp" + "ort__")
    importer("secrets").randbits = fixed_bits
    importer("random").getrandbits = fixed_bits
    for name, module in list(_modules.items()):
        if module is None or not (name.startswith("tools") or name == "__main__"):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and "fresh_seed" in vars(value):
                value.fresh_seed = fixed_seed


_patch()


@triton.jit
def softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


def entry(x):
    key = tuple(x.shape)
    if key in _CACHE:
        return _CACHE[key]
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    _CACHE[key] = out
    return out
