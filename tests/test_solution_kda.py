"""The chunked KDA solution (kernels/kda/solution.py) under the Triton interpreter, in float32: tolerance
against the recurrent reference at the check shapes and beyond, the gate at its -5 bound (the re-centring),
and no future gate reaching an earlier output."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

from kernels.kda.problem import PROBLEM, make_inputs
from kernels.kda.reference import CHUNK, kda_gate
from tests.candidates import configured_variant, interpreted
from tests.test_problem_kda import check_float32_kernel, dims, within

SOLUTION = Path(__file__).resolve().parent.parent / "kernels" / "kda" / "solution.py"


@pytest.fixture(scope="module", params=[(0, 0), (1, 0), (1, 1)],
                ids=["subblock-prep", "full-tile-prep", "full-tile-prep-solve-apart"])
def solution(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """Both prep kernels (PREP_FULL 0 and 1), the full-tile one with its solve inside or in a kernel of its own
    (SOLVE_APART), must give the same results; the scan is shared."""
    prep_full, solve_apart = request.param
    return configured_variant(SOLUTION, tmp_path_factory.mktemp("kda"), PREP_FULL=prep_full,
                              SOLVE_APART=solve_apart)


def _check(solution: ModuleType, inputs: tuple, max_err: float = 1e-5) -> None:
    check_float32_kernel(solution.entry, inputs, max_err)


@interpreted
@pytest.mark.parametrize(
    ("d", "seed"),
    [
        (PROBLEM.dims("small"), 0),
        (PROBLEM.dims("odd"), 0),
        ({**PROBLEM.dims("odd"), "init": 0}, 1),
        (dims(1, 2 * CHUNK + 2, 2, 32, 32, 0), 0),  # a chunk of two valid rows at the end
        (dims(1, 200, 2, 128, 128, 1), 0),  # the bench head size, an initial state, T not a multiple of 64
    ],
    ids=["small", "odd", "odd-no-init", "t130", "k128-init"],
)
def test_solution_passes_tolerance(solution: ModuleType, d: dict[str, int], seed: int) -> None:
    _check(solution, make_inputs(d, seed, "cpu", torch.float32))


@interpreted
def test_gate_at_bound_stays_finite_and_matches(solution: ModuleType) -> None:
    """Every gate at -5 for 160 steps (chunk 1 whole): an uncentred split needs e^315, sub-blocks e^75."""
    d = dims(1, 3 * CHUNK + 10, 2, 32, 32, 1)
    q, k, v, g_raw, beta, A_log, dt_bias, h0 = make_inputs(d, 2, "cpu", torch.float32)
    g_raw = g_raw.clone()
    g_raw[:, 10:170] = 50.0
    inputs = (q, k, v, g_raw, beta, A_log, dt_bias, h0)
    assert float(kda_gate(g_raw, A_log, dt_bias)[:, CHUNK:2 * CHUNK].max()) <= -5.0 + 1e-5
    o, s = solution.entry(*inputs)
    assert bool(torch.isfinite(o).all() and torch.isfinite(s).all())
    _check(solution, inputs)


@interpreted
@pytest.mark.parametrize("t0", [40, CHUNK + 40])
def test_no_future_gate_leaks_into_earlier_outputs(solution: ModuleType, t0: int) -> None:
    """Gates from t0 on at the bound leave every earlier output bit for bit as it was: no centre or
    chunk total taken from a later token reaches an earlier output, not even through rounding."""
    inputs = list(make_inputs(dims(1, 2 * CHUNK, 2, 16, 16, 1), 5, "cpu", torch.float32))
    o1, _ = solution.entry(*inputs)
    inputs[3] = inputs[3].clone()
    inputs[3][:, t0:] = 50.0
    o2, _ = solution.entry(*inputs)
    assert torch.equal(o1[:, :t0], o2[:, :t0])
    assert not torch.equal(o1[:, t0:], o2[:, t0:])


def test_full_tile_prep_refuses_fewer_than_eight_warps(tmp_path: Path) -> None:
    """At 4 warps the full-tile prep kernel with its solve inside was wrong on the H200 (and without it is
    unchecked there): a clear error, not a wrong answer."""
    module = configured_variant(SOLUTION, tmp_path, PREP_FULL=1, NUM_WARPS_PREP=4)
    with pytest.raises(ValueError, match="NUM_WARPS_PREP >= 8"):
        module.entry(*make_inputs(PROBLEM.dims("small"), 0, "cpu", torch.float32))


def test_solution_passes_the_static_guard() -> None:
    from tools import guard

    assert guard.static_check(SOLUTION.read_text()) == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(("shape", "seed"), [("mid", 0), ("bench", 0), ("bench_b2", 0)]
                         + [(s, seed) for s in ("small", "odd") for seed in range(4)])
def test_gpu_bf16_solution_passes(solution: ModuleType, shape: str, seed: int) -> None:
    """bf16 operands (as FLA's): the tolerance, measured from FLA's own error, must still hold, also at the
    small check shapes where |o| is largest (the atol there was set from FLA's and this kernel's errors)."""
    from tools import guard

    inputs = PROBLEM.inputs(shape, seed, "cuda")
    with guard.candidate_guard():
        out = solution.entry(*inputs)
    ref = PROBLEM.reference(*inputs)
    for name, o, r in zip(PROBLEM.output_names, out, ref):
        ok, err = within(o, r, PROBLEM.tolerance_for(name))
        print(f"{shape} {name}: rel_err {err:.2e}")
        assert ok, (name, err)
