"""What the MLA decode kernel files' tests share: one call of a candidate's entry() under the guard, checked."""

from __future__ import annotations

from types import ModuleType

import torch

from kernels.mla_decode.problem import D_LATENT, PROBLEM
from kernels.spec import compare
from tools import guard


def run_checked(module: ModuleType, shape: str, seed: int = 0) -> None:
    """entry() at `shape` under the guard: the output's shape and dtype, within tolerance (and float32 on the CPU
    exact but for rounding), the inputs untouched."""
    q, kv = PROBLEM.inputs(shape, seed, "cpu")
    q_before, kv_before = q.clone(), kv.clone()
    with guard.candidate_guard():
        out = module.entry(q, kv)
    dims = PROBLEM.dims(shape)
    assert out.shape == (dims["B"], dims["H"], D_LATENT) and out.dtype == q.dtype
    verdict = compare(out, PROBLEM.reference(q, kv)[0], PROBLEM.tolerance)
    assert verdict["ok"], verdict
    assert verdict["rel_err"] < 1e-5, "float32 on the CPU should be exact but for rounding"
    assert torch.equal(q, q_before) and torch.equal(kv, kv_before)
