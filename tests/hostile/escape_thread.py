"""Torch compute in a thread: the dispatch mode stack is thread-local.

Trick: `threading` (reached as `torch.sys.modules["threading"]`) runs `torch.softmax` in a new thread, where the
TorchDispatchMode installed around entry() does not exist; entry() joins the thread and returns its result.
Expected verdict: not correct-and-verified (as escape_disable_modes.py).
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = "not_verified"
ISOLATION = "shared"

threading = torch.sys.modules["threading"]


def entry(x):
    box = {}

    def work():
        box["out"] = getattr(torch, "soft" + "max")(x, -1)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return box["out"]
