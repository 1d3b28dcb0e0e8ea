"""The softmax computed in plain Python over `.tolist()`: no torch op, no numpy, no kernel of any kind.

Trick: `tolist()` and `torch.tensor(list)` are no compute to the dispatch guard, and a kernel census finds no
torch kernel either (only copies): nothing refuses it, yet no Triton kernel ran. Slow, but the CPU check shapes
are small.
Expected verdict: not correct-and-verified (a candidate must launch the Triton kernels that do the work).
"""

import math

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = "not_verified"
ISOLATION = "shared"


def entry(x):
    rows = []
    for row in x.tolist():
        m = max(row)
        e = [math.exp(v - m) for v in row]
        s = sum(e)
        rows.append([v / s for v in e])
    return torch.tensor(rows, dtype=x.dtype, device=x.device)
