"""`raise SystemExit(0)` from entry(): a BaseException that `except Exception` does not catch.

Trick: a harness that guards the candidate's call with `except Exception` lets SystemExit through to whatever
is above it: the worker's own loop, which may report it as its own internal fault or exit cleanly without a
verdict, or take it for a normal end.
Expected verdict: runtime_error (the candidate's fault, with its line) or crashed; never correct, never an
internal error of the tools.
"""

import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"runtime_error", "crashed"}
ISOLATION = "shared"


def entry(x):
    raise SystemExit(0)
