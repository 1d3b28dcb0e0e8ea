"""A candidate that hands the work to torch through getattr (invisible to the static check).

Trick: `getattr(torch, "soft" + "max")(x, -1)`. The run-time compute guard sees the aten op and refuses
it. It is the follower of patch_guard_off.py: after a candidate switched the guard off in the warm
process, this one must still be refused.
Expected verdict: rejected.
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"rejected"}
ISOLATION = "shared"


def entry(x):
    return getattr(torch, "soft" + "max")(x, -1)
