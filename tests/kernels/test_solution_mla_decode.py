"""The project's split-KV MLA decode (kernels/mla_decode/solution.py): correct on every path, under the guard."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

from client.tuner import tune_space
from kernels import solution_path
from kernels.mla_decode.problem import PROBLEM
from kernels.spec import compare
from tests.candidates import configured_variant, interpreted, load_candidate
from tests.kernels.mla_common import run_checked
from tools import guard
from tools.compiler import compile_candidate

SOURCE_PATH = solution_path("mla_decode")


@pytest.fixture(scope="module")
def solution() -> ModuleType:
    assert SOURCE_PATH is not None, "kernels/mla_decode/solution.py is missing"
    return load_candidate(SOURCE_PATH)


def variant(tmp_path: Path, **config: object) -> ModuleType:
    assert SOURCE_PATH is not None
    return configured_variant(SOURCE_PATH, tmp_path, **config)


def test_solution_passes_the_static_guard() -> None:
    assert SOURCE_PATH is not None
    assert guard.static_check(SOURCE_PATH.read_text()) == []


def test_split_plan_covers_every_token_once(solution: ModuleType) -> None:
    for B, H, S in [(1, 64, 8192), (64, 64, 8192), (2, 16, 200), (3, 8, 77), (1, 64, 1), (1, 1, 100_003)]:
        tokens, splits = solution.split_plan(B, H, S, 132)
        assert tokens % solution.BLOCK_N == 0
        assert (splits - 1) * tokens < S <= splits * tokens, (B, H, S, tokens, splits)
    # B=1 fills the GPU: about one program per SM, each a whole number of tiles
    tokens, splits = solution.split_plan(1, 64, 8192, 132)
    assert splits * -(-64 // solution.BLOCK_H) >= 100


def test_tune_space_names_are_module_constants() -> None:
    assert SOURCE_PATH is not None
    space, current = tune_space(SOURCE_PATH.read_text())
    assert set(space) <= set(current) and all(current[k] in v for k, v in space.items())


@interpreted
@pytest.mark.parametrize("shape", ["small", "odd"])
def test_split_and_combine_are_correct(solution: ModuleType, shape: str) -> None:
    dims = PROBLEM.dims(shape)
    _, splits = solution.split_plan(dims["B"], dims["H"], dims["S"], 132)
    assert splits > 1, "the check shapes should exercise the combine kernel"
    run_checked(solution, shape, seed=3)


@interpreted
def test_one_split_writes_the_output_directly(tmp_path: Path) -> None:
    module = variant(tmp_path, SPLIT_WAVES=0.01)
    assert module.split_plan(3, 8, 77, 132)[1] == 1
    run_checked(module, "odd", seed=5)


@interpreted
@pytest.mark.parametrize("config", [
    {"BLOCK_H": 16, "BLOCK_N": 32, "PARTIAL_BF16": 1},   # one full head group at small, a masked one at odd
    {"BLOCK_H": 32, "BLOCK_N": 64, "SPLIT_WAVES": 2.0},
    {"PARTIAL_BF16": 0, "COMBINE_BLOCK_D": 64, "COMBINE_NUM_WARPS": 1},
])
def test_other_configurations_are_correct(tmp_path: Path, config: dict[str, object]) -> None:
    module = variant(tmp_path, **config)
    for shape in ("small", "odd"):
        run_checked(module, shape, seed=11)


@interpreted
def test_several_head_groups_a_program_each(tmp_path: Path) -> None:
    """H=24 with 16 heads a program: two head groups, the second half masked, per batch element."""
    module = variant(tmp_path, BLOCK_H=16, BLOCK_N=16)
    q, kv = PROBLEM.make_inputs({"B": 2, "H": 24, "S": 45}, 7, "cpu", torch.float32)
    with guard.candidate_guard():
        out = module.entry(q, kv)
    verdict = compare(out, PROBLEM.reference(q, kv)[0], PROBLEM.tolerance)
    assert verdict["ok"] and verdict["rel_err"] < 1e-5, verdict


def test_the_gluon_split_kernel_compiles_for_hopper_without_spills(tmp_path: Path) -> None:
    """USE_GLUON = 2 takes the Gluon split kernel on any device, so compile records it on the CPU: it must fit
    one CTA an SM (q and two cache stages in shared memory) and keep its accumulator in registers."""
    assert SOURCE_PATH is not None
    source = SOURCE_PATH.read_text()
    assert "\nUSE_GLUON = 1\n" in source
    r = compile_candidate("mla_decode", source.replace("\nUSE_GLUON = 1\n", "\nUSE_GLUON = 2\n"), "bench_b64",
                          cache_dir=tmp_path)
    assert r.ok, r.errors
    split = next(k for k in r.kernels if k.name == "mla_split_gluon_kernel")
    assert split.uses_wgmma and split.uses_tma and split.num_warps == 8
    assert split.spill_bytes == 0 and split.shared_bytes <= 232448, split
    assert split.grid == [2, 64]


def test_which_inputs_take_the_gluon_kernel(solution: ModuleType, tmp_path: Path) -> None:
    """The interpreter cannot run Gluon: with the default USE_GLUON = 1 a CPU input takes the Triton kernel, even
    in bf16 with long splits. Forced (USE_GLUON = 2), bf16 contiguous inputs take it, and what its descriptors
    cannot address does not: float32, a mixed dtype, a non-contiguous or misaligned view, and splits that end
    inside a Gluon tile."""
    q, kv = (x.to(torch.bfloat16) for x in PROBLEM.inputs("small", 0, "cpu"))
    long_split = 64 * solution.BLOCK_N
    assert solution.USE_GLUON == 1
    assert not solution._takes_gluon(q, kv, long_split)
    forced = variant(tmp_path, USE_GLUON=2)
    assert forced._takes_gluon(q, kv, long_split)
    assert not forced._takes_gluon(q.float(), kv.float(), long_split)
    assert not forced._takes_gluon(q, kv.half(), long_split)
    assert not forced._takes_gluon(q.transpose(0, 1), kv, long_split)
    misaligned = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)
    assert misaligned.is_contiguous() and not forced._takes_gluon(misaligned, kv, long_split)
    assert not forced._takes_gluon(q, kv, long_split + forced.GLUON_BLOCK_N // 2)


gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("shape", ["bench", "bench_b64", "small", "odd"])
def test_solution_on_gpu(solution: ModuleType, shape: str) -> None:
    q, kv = PROBLEM.inputs(shape, 0, "cuda")
    with guard.candidate_guard():
        out = solution.entry(q, kv)
    verdict = compare(out, PROBLEM.reference(q, kv)[0], PROBLEM.tolerance)
    assert verdict["ok"], verdict


@pytest.mark.parametrize(("shape", "config"), [
    ("bench", {}), ("bench_b64", {}), ("small", {}), ("odd", {}),
    ("bench_b64", {"GLUON_BLOCK_N": 32, "GLUON_STAGES": 4}), ("odd", {"GLUON_BLOCK_N": 32, "GLUON_STAGES": 3}),
])
def test_gluon_kernel_on_gpu(tmp_path: Path, shape: str, config: dict[str, int]) -> None:
    """The Gluon split kernel at every shape (USE_GLUON = 2), one-tile splits and head blocks past H included."""
    module = variant(tmp_path, USE_GLUON=2, **config)
    q, kv = PROBLEM.inputs(shape, 0, "cuda")
    with guard.candidate_guard():
        out = module.entry(q, kv)
    verdict = compare(out, PROBLEM.reference(q, kv)[0], PROBLEM.tolerance)
    assert verdict["ok"], verdict


for _mark in gpu:
    _mark(test_solution_on_gpu)
    _mark(test_gluon_kernel_on_gpu)
