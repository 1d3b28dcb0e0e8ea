"""`raise KeyboardInterrupt` from entry(): looks like the operator pressed Ctrl-C.

Trick: a BaseException that a harness may take for a cancellation by its user, not a fault of the candidate.
Expected verdict: runtime_error or crashed; never correct, never an internal error or a cancellation.
"""

import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"runtime_error", "crashed"}
ISOLATION = "shared"


def entry(x):
    raise KeyboardInterrupt
