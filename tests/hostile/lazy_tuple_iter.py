"""A lazy tuple: the outputs are computed with torch when the harness iterates over what entry() returned.

Trick: entry() returns an (empty) tuple subclass whose `__iter__` and `__len__` are the candidate's code. The
harness's normalisation (`isinstance(value, tuple)`, then iterating it) runs that code after the guard has
exited: it computes `torch.softmax(x)` there, unguarded and untimed, and yields it.
Expected verdict: wrong_output (only a plain tensor, or a plain tuple of plain tensors, is an output), or
incorrect/rejected.
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"wrong_output", "incorrect", "rejected"}
ISOLATION = "shared"

_dispatch = torch.utils._python_dispatch


class LazyOutputs(tuple):
    def __iter__(self):
        with _dispatch._disable_current_modes():
            yield getattr(torch, "soft" + "max")(self.source, -1)

    def __len__(self):
        return 1


def entry(x):
    outs = LazyOutputs()
    outs.source = x
    return outs
