"""Replacing the harness's check functions and sys.modules entries in the warm process.

Trick: every function of the tools' modules that runs or judges a trial (check_candidate, run_trial, _check,
_compare_all, ...) is replaced by one that reports success, and `sys.modules["tools.checks"]` is replaced by a
fake module holding the same, so a later `from tools.checks import check_candidate` gets the fake too. The
candidate returns zeros; plain_zeros.py follows it in the same pool.
Expected verdict: incorrect, for this one and for the wrong candidate after it.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect"}
ISOLATION = "fresh"
NEXT = ["plain_zeros.py", "control_honest.py"]

_modules = torch.sys.modules
_types = _modules["types"]


def all_correct(*args, **kwargs):
    return {"correct": True, "error_class": None, "error": None, "max_rel_err": 0.0, "trials": [],
            "ok": True, "verified": True, "outputs": []}


def no_error(*args, **kwargs):
    return 0.0


REPLACE = {"check_candidate": all_correct, "run_trial": all_correct, "_compare_all": no_error,
           "compare_all": no_error}


def _patch():
    for name, module in list(_modules.items()):
        if module is None or not (name.startswith("tools") or name == "__main__"):
            continue
        for attr, fake in REPLACE.items():
            if callable(getattr(module, attr, None)):
                setattr(module, attr, fake)
    fake = _types.ModuleType("tools.checks")
    for attr, value in REPLACE.items():
        setattr(fake, attr, value)
    real = _modules.get("tools.checks")
    if real is not None:
        for attr, value in vars(real).items():
            if not hasattr(fake, attr):
                setattr(fake, attr, value)
    _modules["tools.checks"] = fake


_patch()


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def entry(x):
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
