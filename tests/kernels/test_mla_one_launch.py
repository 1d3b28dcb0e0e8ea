"""The one-launch MLA decode candidate (kernels/mla_decode/one_launch.py): the split kernel merges its own splits
where the whole grid fits on the GPU, the solution's split and combine kernels elsewhere; correct on every path,
under the guard."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from client.tuner import tune_space
from kernels import PROBLEMS_DIR
from kernels.mla_decode.problem import PROBLEM
from kernels.spec import compare
from tests.candidates import configured_variant, interpreted, load_candidate
from tests.kernels.mla_common import run_checked
from tools import guard

SOURCE_PATH = PROBLEMS_DIR / "mla_decode" / "one_launch.py"


@pytest.fixture(scope="module")
def candidate() -> ModuleType:
    return load_candidate(SOURCE_PATH)


def variant(tmp_path: Path, **config: object) -> ModuleType:
    return configured_variant(SOURCE_PATH, tmp_path, **config)


def refuse(module: ModuleType, kernel: str) -> None:
    """Make launching `kernel` of `module` fail the test."""

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{kernel} ran")

    setattr(module, kernel, type("Refused", (), {"__getitem__": lambda self, grid: refused})())


def test_candidate_passes_the_static_guard() -> None:
    assert guard.static_check(SOURCE_PATH.read_text()) == []


def test_tune_space_names_are_module_constants() -> None:
    space, current = tune_space(SOURCE_PATH.read_text())
    assert set(space) <= set(current) and all(current[k] in v for k, v in space.items())
    assert {"MERGE_H", "MERGE_D"} <= set(space) and "ONE_LAUNCH" not in current


@interpreted
@pytest.mark.parametrize("shape", PROBLEM.check_shapes)
def test_check_shapes_are_within_tolerance_in_one_launch(tmp_path: Path, shape: str) -> None:
    """At every check shape the grid fits on 132 SMs: the split kernel merges, the combine kernel never runs."""
    module = variant(tmp_path)
    refuse(module, "mla_combine_kernel")
    dims = PROBLEM.dims(shape)
    _, splits = module.split_plan(dims["B"], dims["H"], dims["S"], 132)
    assert splits > 1, "the check shapes should exercise the merge"
    for seed in (3, 4):
        run_checked(module, shape, seed=seed)


@interpreted
@pytest.mark.parametrize("config", [
    {"BLOCK_H": 16, "BLOCK_N": 32, "PARTIAL_BF16": 0},  # several head groups, masked heads at odd
    {"BLOCK_H": 32, "BLOCK_N": 16, "SPLIT_WAVES": 0.5, "MERGE_H": 8, "MERGE_D": 32},
])
def test_other_configurations_are_correct(tmp_path: Path, config: dict[str, object]) -> None:
    module = variant(tmp_path, **config)
    for shape in PROBLEM.check_shapes:
        run_checked(module, shape, seed=11)


@interpreted
def test_one_launch_merges_in_the_split_kernel_and_zeroes_its_counters(tmp_path: Path) -> None:
    """No combine kernel runs, the outputs are right call after call (a counter left non-zero would make the next
    call's merge never happen), and the counters read zero between calls."""
    module = variant(tmp_path, BLOCK_H=16, BLOCK_N=32)
    refuse(module, "mla_combine_kernel")
    refuse(module, "mla_split_kernel")
    for seed in (1, 2, 3):
        run_checked(module, "small", seed=seed)
    assert module._COUNTERS and all(int(c.abs().sum()) == 0 for c in module._COUNTERS.values())
    assert module.merge_plan(128, on_gpu=True) == (4, 64)  # B = 1 at bench: 16 x 8 = 128 mergers, one a split
    assert module.merge_plan(6, on_gpu=True) == (16, 128)  # few splits: fewer, larger mergers
    assert module.merge_plan(6, on_gpu=False) == (16, 512)  # the interpreter: the last program merges alone


@interpreted
def test_more_programs_than_sms_split_and_combine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the grid outgrows the GPU (here a GPU of 3 SMs: 2 splits x 2 batch elements at small), the merge
    cannot wait for programs that are not resident: the split and combine kernels run instead."""
    module = variant(tmp_path, BLOCK_H=16)
    monkeypatch.setattr(module, "_num_sms", lambda device: 3)
    refuse(module, "mla_split_merge_kernel")
    assert module.split_plan(2, 16, 200, 3)[1] * 2 > 3
    run_checked(module, "small", seed=5)


@interpreted
def test_one_split_writes_the_output_directly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = variant(tmp_path)
    monkeypatch.setattr(module, "_num_sms", lambda device: 1)
    assert module.split_plan(3, 8, 77, 1)[1] == 1
    refuse(module, "mla_split_merge_kernel")
    refuse(module, "mla_combine_kernel")
    run_checked(module, "odd", seed=5)


gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize(("shape", "config"), [
    ("bench", {}), ("bench_b64", {}), ("small", {}), ("odd", {}),
    ("bench", {"MERGE_H": 8, "MERGE_D": 32}), ("bench", {"BLOCK_H": 16, "BLOCK_N": 32}),
])
def test_one_launch_on_gpu(tmp_path: Path, shape: str, config: dict[str, Any]) -> None:
    """Every shape, twice in a row (the second call finds the counters the first one left)."""
    module = variant(tmp_path, **config)
    q, kv = PROBLEM.inputs(shape, 0, "cuda")
    for _ in range(2):
        with guard.candidate_guard():
            out = module.entry(q, kv)
        verdict = compare(out, PROBLEM.reference(q, kv)[0], PROBLEM.tolerance)
        assert verdict["ok"], verdict
    assert all(int(c.abs().sum()) == 0 for c in module._COUNTERS.values())


for _mark in gpu:
    _mark(test_one_launch_on_gpu)
