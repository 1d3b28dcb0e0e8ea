"""`os._exit(0)` in entry(): the process ends at once with status 0, no exception, no cleanup.

Trick: a clean exit status may read as success to a supervisor that looks only at the code.
Expected verdict: crashed (or runtime_error); never correct.
"""

import os

import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"crashed", "runtime_error"}
ISOLATION = "shared"


def entry(x):
    os._exit(0)
