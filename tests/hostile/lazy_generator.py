"""A generator in place of the output.

Trick: entry() returns a generator that would compute the softmax with torch when consumed: a harness that
materialises it with tuple() or list() runs candidate code, unguarded, in its own context.
Expected verdict: wrong_output.
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"wrong_output", "rejected"}
ISOLATION = "shared"

_dispatch = torch.utils._python_dispatch


def _later(x):
    with _dispatch._disable_current_modes():
        yield getattr(torch, "soft" + "max")(x, -1)


def entry(x):
    return _later(x)
