"""The softmax problem: inputs, reference, tolerance, cost model, baseline, and its starter.

CPU tests run the starter under the Triton interpreter in float32; the GPU test runs it compiled.
Wrong variants of the starter are made by editing its source, so they are real Triton kernels.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import pytest
import torch

from kernels import get_problem, starter_path
from kernels.softmax.problem import OUTLIER_EVERY, OUTLIER_HIGH, ROW_OFFSET
from kernels.spec import compare
from tests.candidates import interpreted, load_candidate, starter_variant

PROBLEM = get_problem("softmax")
SEEDS = (0, 1, 2)
CHECK_SHAPES = ("small", "odd")
# The starter runs on CPU tensors only under the interpreter (conftest picks it where there is no GPU).


@pytest.fixture(scope="module")
def starter() -> ModuleType:
    return load_candidate(starter_path("softmax"))


def check(out: torch.Tensor, x: torch.Tensor) -> dict:
    (ref,) = PROBLEM.reference(x)
    return compare(out, ref, PROBLEM.tolerance)


@interpreted
@pytest.mark.parametrize("shape", CHECK_SHAPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_starter_is_correct(starter: ModuleType, shape: str, seed: int) -> None:
    (x,) = PROBLEM.inputs(shape, seed, "cpu")
    x_before = x.clone()
    out = starter.entry(x)
    result = check(out, x)
    assert result["ok"], result
    assert out.dtype == x.dtype and out.shape == x.shape
    assert torch.equal(x, x_before), "the starter modified its input"


def test_check_shapes_include_odd_sizes() -> None:
    assert set(CHECK_SHAPES) <= set(PROBLEM.check_shapes)
    for name in PROBLEM.check_shapes:
        cols = PROBLEM.dims(name)["cols"]
        assert cols & (cols - 1), f"{name}: cols={cols} is a power of two, so tails go untested"


def test_make_inputs_is_deterministic_varied_and_never_zero() -> None:
    (a,) = PROBLEM.inputs("small", 0, "cpu")
    (b,) = PROBLEM.inputs("small", 0, "cpu")
    (c,) = PROBLEM.inputs("small", 1, "cpu")
    dims = PROBLEM.dims("small")
    assert a.shape == (dims["rows"], dims["cols"]) and a.dtype == torch.float32
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert bool((a != 0).all())


def test_inputs_are_shifted_so_max_subtraction_matters() -> None:
    for shape in ("small", "odd"):
        (x,) = PROBLEM.inputs(shape, 0, "cpu")
        row_max = x.amax(dim=-1)
        # Some row overflows exp() in float32 (> 88.7), some underflows it entirely (< -103.9) but for its outlier.
        assert float(row_max.max()) > 89 and float(x.topk(2, dim=-1).values[:, 1].min()) < -104, shape
        assert float(row_max.abs().max()) <= ROW_OFFSET + OUTLIER_HIGH + 20
        # ...yet each softmax is neither flat nor one-hot, but for the outlier rows: one element far above the rest
        # (more than exp's float32 range over any other), so that only the row's true max is a safe shift.
        (p,) = PROBLEM.reference(x)
        top = p.amax(dim=-1)
        two = x.topk(2, dim=-1).values
        outlier = (two[:, 0] - two[:, 1]) > 88.7
        assert int(outlier.sum()) == max(1, x.shape[0] // OUTLIER_EVERY), shape
        assert bool((top[outlier] > 0.99).all())
        assert bool((top[~outlier] > 5 / x.shape[1]).all()) and bool((top[~outlier] < 0.9).all()), shape
        # Unshifted, exp() gives inf on one side and 0/0 on the other.
        assert not bool(torch.isfinite(_no_max_subtraction(x)).all())


def test_reference_matches_naive_exp_sum() -> None:
    (x,) = PROBLEM.inputs("odd", 3, "cpu")
    (ref,) = PROBLEM.reference(x)
    assert ref.dtype == torch.float32
    for i, row in enumerate(x.tolist()):
        m = max(row)
        e = [math.exp(v - m) for v in row]
        total = math.fsum(e)
        naive = torch.tensor([v / total for v in e], dtype=torch.float64)
        assert torch.allclose(ref[i].double(), naive, rtol=1e-6, atol=1e-12)


def _no_max_subtraction(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)


def _bf16_arithmetic(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.to(torch.bfloat16), dim=-1).float()


def _tail_dropped(x: torch.Tensor) -> torch.Tensor:
    cols = x.shape[1] // 64 * 64
    out = torch.zeros_like(x)
    out[:, :cols] = torch.softmax(x[:, :cols], dim=-1)
    return out


def _padding_counted(x: torch.Tensor) -> torch.Tensor:
    # Padding read as 0 instead of -inf joins the max and the sum.
    cols = x.shape[1]
    padded = torch.cat([x, x.new_zeros(x.shape[0], (1 << (cols - 1).bit_length()) - cols)], dim=1)
    return torch.softmax(padded, dim=-1)[:, :cols]


@pytest.mark.parametrize("bug", [_no_max_subtraction, _bf16_arithmetic, _tail_dropped, _padding_counted])
@pytest.mark.parametrize("shape", CHECK_SHAPES)
def test_tolerance_rejects_plausible_bugs(bug, shape: str) -> None:
    (x,) = PROBLEM.inputs(shape, 0, "cpu")
    assert not check(bug(x), x)["ok"]


@interpreted
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('other=-float("inf")', "other=0.0"),  # padding joins max and sum
        ("x = x - tl.max(x, axis=0)", "x = x"),  # no max subtraction: exp over/underflows
    ],
    ids=["padding_as_zero", "no_max"],
)
def test_wrong_triton_kernels_fail(tmp_path: Path, old: str, new: str) -> None:
    wrong = starter_variant("softmax", tmp_path, old, new)
    (x,) = PROBLEM.inputs("odd", 0, "cpu")
    assert not check(wrong.entry(x), x)["ok"]


def test_torch_baseline_matches_reference_on_cpu() -> None:
    baseline = PROBLEM.baseline("torch")
    assert baseline.available() is None
    for shape in CHECK_SHAPES:
        (x,) = PROBLEM.inputs(shape, 0, "cpu")
        result = check(baseline.fn(x), x)
        assert result["ok"], (shape, result)


def test_cost_model_scales_with_size() -> None:
    base = {"rows": 10, "cols": 100}
    for model in (PROBLEM.flops, PROBLEM.bytes):
        assert model(base) > 0
        assert model({"rows": 20, "cols": 100}) == pytest.approx(2 * model(base))
        assert model({"rows": 10, "cols": 300}) == pytest.approx(3 * model(base))
    # One float32 read and one write per element.
    assert PROBLEM.bytes(PROBLEM.dims("bench")) == 4096 * 8192 * 8


def test_describe_lists_shapes_and_baseline() -> None:
    info = PROBLEM.describe()
    assert info["gpu_dtype"] == "float32" and info["cpu_dtype"] == "float32"
    assert {"bench", "small", "odd"} <= set(info["shapes"])
    assert [b["name"] for b in info["baselines"]] == ["torch"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("shape", ["bench", "small", "odd"])
def test_starter_and_baseline_on_gpu(starter: ModuleType, shape: str) -> None:
    (x,) = PROBLEM.inputs(shape, 0, "cuda")
    assert x.dtype == PROBLEM.gpu_dtype
    (ref,) = PROBLEM.reference(x)
    result = compare(starter.entry(x), ref, PROBLEM.tolerance)
    assert result["ok"], result
    result = compare(PROBLEM.baseline("torch").fn(x), ref, PROBLEM.tolerance)
    assert result["ok"], result
