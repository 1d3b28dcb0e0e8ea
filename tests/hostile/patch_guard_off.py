"""Switching the run-time guard off in the warm process.

Trick: at import, `candidate_guard`, `compute_guard` and `import_guard` in every tools module that holds them
(tools.guard, tools.checks, tools.profile_job, tools.candidate_host, ...) become no-ops (`contextlib.nullcontext`,
reached through `torch.sys.modules`). This candidate then calls `torch.softmax` through getattr; so does the
next one in the same pool (plain_torch_softmax.py), which on its own is refused.
Expected verdict: not correct-and-verified for this one (in its own process it can patch its own guard; only
a kernel census can catch it), and rejected for plain_torch_softmax.py after it.
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = "not_verified"
ISOLATION = "fresh"
NEXT = ["plain_torch_softmax.py", "control_honest.py"]

_modules = torch.sys.modules
_nullcontext = _modules["contextlib"].nullcontext
GUARDS = ("candidate_guard", "compute_guard", "import_guard", "gluon_launches_refused")


def no_guard(*args, **kwargs):
    return _nullcontext()


for _name, _module in list(_modules.items()):
    if _module is not None and (_name.startswith("tools") or _name == "__main__"):
        for _attr in GUARDS:
            if _attr != "gluon_launches_refused" and callable(getattr(_module, _attr, None)):
                setattr(_module, _attr, no_guard)


def entry(x):
    return getattr(torch, "soft" + "max")(x, -1)
