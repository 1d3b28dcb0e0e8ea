"""A huge output: a 1 GiB tensor of the wrong shape, allocated lazily (torch.empty touches no page).

Trick: an output is data the trusted side must read; a harness that copies or compares it before checking its
size and shape spends the memory (and on a small machine dies of it). 1 GiB keeps this test safe to run.
Expected verdict: wrong_shape or wrong_output, decided from the metadata alone.
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"wrong_shape", "wrong_output"}
ISOLATION = "shared"


def entry(x):
    return torch.empty((1 << 28,), dtype=torch.float32, device=x.device)
