"""Torch compute with the dispatch guard popped: `torch.utils._python_dispatch._disable_current_modes()`.

Trick: the run-time compute guard is a TorchDispatchMode on the mode stack; this context manager, reached as
an attribute (no import, no call the static check knows), takes every mode off the stack for its body. Inside
it, `getattr(torch, "softmax")` runs unrefused: right values, no Triton.
Expected verdict: not correct-and-verified (refused, or on a GPU caught by the kernel census; without a GPU the
report must not claim `verified` for what only a census could check).
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = "not_verified"
ISOLATION = "shared"

_dispatch = torch.utils._python_dispatch


def entry(x):
    with _dispatch._disable_current_modes():
        return getattr(torch, "soft" + "max")(x, -1)
