"""The chunked KDA solution (kernels/kda/solution.py) under the Triton interpreter, in float32: tolerance
against the recurrent reference at the check shapes and beyond, the gate at its -5 bound (the re-centring),
and no future gate reaching an earlier output, for each variant of the prep and solve kernels that runs on the
CPU (the Gluon kernels are checked on the GPU and compiled for sm_90 here)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

from kernels.kda.problem import PROBLEM, make_inputs
from kernels.kda.reference import CHUNK, kda_gate
from tests.candidates import configured_variant, interpreted, load_candidate
from tests.kernels.test_problem_kda import check_float32_kernel, dims, within

SOLUTION = Path(__file__).resolve().parents[2] / "kernels" / "kda" / "solution.py"


VARIANTS: dict[str, dict[str, object]] = {
    "defaults": {},  # the gate in a kernel of its own, Akk in the input dtype, the "input" inverse
    "gate-in-prep": {"GATE_APART": 0},
    "gate-in-prep-float32-akk-tf32-inverse": {"GATE_APART": 0, "AKK_BF16": 0, "INV_PRECISION": "tf32"},
}


@pytest.fixture(scope="module", params=list(VARIANTS.values()), ids=list(VARIANTS))
def solution(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The Triton prep with its gate in a kernel of its own or inside it (GATE_APART), and the solve with Akk in
    the input dtype or in float32 (AKK_BF16) under another inverse precision, must give the same results; the
    scan is shared."""
    return configured_variant(SOLUTION, tmp_path_factory.mktemp("kda"), **request.param)


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


def _gate_at_bound_inputs(tail: int, last_at_bound: bool, device: str = "cpu",
                          dtype: torch.dtype = torch.float32) -> tuple:
    """T = 3 chunks + tail, every gate at -5 for 160 steps (chunk 1 whole); with last_at_bound the last chunk too."""
    q, k, v, g_raw, beta, A_log, dt_bias, h0 = make_inputs(dims(1, 3 * CHUNK + tail, 2, 32, 32, 1), 2, device,
                                                           dtype)
    g_raw = g_raw.clone()
    g_raw[:, 10:170] = 50.0
    if last_at_bound:
        g_raw[:, 3 * CHUNK:] = 50.0
    return q, k, v, g_raw, beta, A_log, dt_bias, h0


@interpreted
def test_gate_at_bound_stays_finite_and_matches(solution: ModuleType) -> None:
    """Every gate at -5 for 160 steps (chunk 1 whole): an uncentred split needs e^315, sub-blocks e^75."""
    q, k, v, g_raw, beta, A_log, dt_bias, h0 = _gate_at_bound_inputs(10, last_at_bound=False)
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


@interpreted
@pytest.mark.parametrize("gate_apart", [1, 0], ids=["gate-apart", "gate-in-prep"])
def test_gate_at_bound_over_a_ragged_last_chunk(tmp_path: Path, gate_apart: int) -> None:
    """The gate kernel's padding: the gate at its bound over the whole last chunk of 40 rows, whose G past T must
    be G_last (0 there gives e^200 from the sub-block's centre) and whose centre past T (row 48) must be finite;
    and the same with the gate inside the prep. In float32 Akk stays float32 (the input dtype), so AKK_BF16 changes
    nothing here: its bf16 path is checked in test_gpu_bf16_solution_passes and
    test_gpu_akk_bf16_gives_the_same_outputs."""
    module = configured_variant(SOLUTION, tmp_path, GATE_APART=gate_apart)
    inputs = _gate_at_bound_inputs(40, last_at_bound=True)
    o, s = module.entry(*inputs)
    assert bool(torch.isfinite(o).all() and torch.isfinite(s).all())
    _check(module, inputs)


def test_triton_prep_refuses_fewer_than_eight_warps(tmp_path: Path) -> None:
    """At 4 warps the Triton prep kernel with the solve inside was wrong on the H200 (and without it is
    unchecked there): a clear error, not a wrong answer."""
    module = configured_variant(SOLUTION, tmp_path, NUM_WARPS_PREP=4)
    with pytest.raises(ValueError, match="NUM_WARPS_PREP >= 8"):
        module.entry(*make_inputs(PROBLEM.dims("small"), 0, "cpu", torch.float32))


def test_akk_bf16_refuses_other_inverse_precisions(tmp_path: Path) -> None:
    """Akk in the input dtype only loses nothing where the inverse rounds it to that dtype anyway ("input")."""
    module = configured_variant(SOLUTION, tmp_path, AKK_BF16=1, INV_PRECISION="tf32")
    with pytest.raises(ValueError, match="AKK_BF16 = 1 needs INV_PRECISION = 'input'"):
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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("shape", ["small", "odd", "mid"])
def test_gpu_akk_bf16_gives_the_same_outputs(tmp_path: Path, shape: str) -> None:
    """With the "input" inverse, Akk stored in bf16 gives the inverse the operands it rounded from float32 before
    (round to nearest even both times): o and the final state bit for bit as with Akk in float32."""
    from tools import guard

    inputs = PROBLEM.inputs(shape, 0, "cuda")
    outs = []
    for akk_bf16 in (0, 1):
        module = configured_variant(SOLUTION, tmp_path, AKK_BF16=akk_bf16, INV_PRECISION="input")
        with guard.candidate_guard():
            outs.append(module.entry(*inputs))
    for x, y in zip(*outs):
        assert torch.equal(x, y)


def test_the_gluon_prep_compiles_for_hopper_without_spills(tmp_path: Path) -> None:
    """PREP_GLUON = 2 takes the Gluon prep kernel on any device, so compile records it on the CPU: at the bench
    head size (BK = 128, 32 registers a [64, 128] float32 tile) and at the odd shape's K = 16 (one key column a
    thread)."""
    from tools.compiler import compile_candidate

    source = SOLUTION.read_text()
    assert "\nPREP_GLUON = 1\n" in source
    source = source.replace("\nPREP_GLUON = 1\n", "\nPREP_GLUON = 2\n")
    for shape in ("bench", "odd"):
        r = compile_candidate("kda", source, shape, cache_dir=tmp_path)
        assert r.ok, r.errors
        prep = next(k for k in r.kernels if k.name == "kda_chunk_prep_gluon_kernel")
        assert prep.uses_wgmma and prep.num_warps == 8, prep
        assert prep.spill_bytes == 0, prep
        assert not any(k.name == "kda_chunk_prep_full_kernel" for k in r.kernels)


def test_the_cpu_never_takes_the_gluon_prep() -> None:
    """The interpreter cannot run Gluon: with the default PREP_GLUON = 1 a CPU input takes the Triton kernel."""

    solution = load_candidate(SOLUTION)
    q = make_inputs(PROBLEM.dims("small"), 0, "cpu", torch.bfloat16)[0]
    assert solution.PREP_GLUON == 1
    assert not solution._takes_gluon_prep(q)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("tail", [10, 40])
def test_gpu_gate_at_bound_stays_finite(tail: int) -> None:
    """The default kernels on the GPU (the Gluon prep) with every gate at -5 for 160 steps and over the whole
    last chunk (its centre rows past T): finite, and within the bf16 tolerance of the reference."""
    from tools import guard

    solution = load_candidate(SOLUTION)
    inputs = _gate_at_bound_inputs(tail, last_at_bound=True, device="cuda", dtype=torch.bfloat16)
    with guard.candidate_guard():
        out = solution.entry(*inputs)
    assert all(bool(torch.isfinite(o).all()) for o in out)
    ref = PROBLEM.reference(*inputs)
    for name, o, r in zip(PROBLEM.output_names, out, ref):
        ok, err = within(o, r, PROBLEM.tolerance_for(name))
        assert ok, (name, err)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("shape", ["small", "odd", "mid"])
def test_gpu_triton_prep_still_passes(tmp_path: Path, shape: str) -> None:
    """PREP_GLUON = 0: the Triton full-tile prep, the path the CPU takes, stays right on the GPU too."""
    from tools import guard

    module = configured_variant(SOLUTION, tmp_path, PREP_GLUON=0)
    inputs = PROBLEM.inputs(shape, 0, "cuda")
    with guard.candidate_guard():
        out = module.entry(*inputs)
    ref = PROBLEM.reference(*inputs)
    for name, o, r in zip(PROBLEM.output_names, out, ref):
        ok, err = within(o, r, PROBLEM.tolerance_for(name))
        assert ok, (name, err)


def test_float16_is_refused() -> None:
    """float16 overflows on the re-centred column factors (up to e^75): a clear error, not NaN."""

    solution = load_candidate(SOLUTION)
    with pytest.raises(ValueError, match="float16 cannot hold"):
        solution.entry(*make_inputs(PROBLEM.dims("small"), 0, "cpu", torch.float16))


def test_one_scan_stage_is_refused_at_large_k(tmp_path: Path) -> None:
    """At one stage Triton 3.6's scan read shared memory out of bounds at K = 128 on the H200: a clear error
    before any launch, not an illegal address; at K = 32 (checked right there) it still runs."""
    module = configured_variant(SOLUTION, tmp_path, NUM_STAGES=1)
    with pytest.raises(ValueError, match="NUM_STAGES >= 2"):
        module.entry(*make_inputs(dims(1, 70, 1, 128, 128, 0), 0, "cpu", torch.float32))
    _check(module, make_inputs(PROBLEM.dims("small"), 0, "cpu", torch.float32))


def test_the_gluon_scan_compiles_for_hopper_without_spills(tmp_path: Path) -> None:
    """USE_GLUON_SCAN = 2 takes the Gluon scan on any device, so compile records it on the CPU (as for 132 SMs):
    32 value columns on one warpgroup at bench, 128 on four at bench_h96, each within sm_90's shared memory."""
    from tools.compiler import compile_candidate

    source = SOLUTION.read_text()
    assert "\nUSE_GLUON_SCAN = 1\n" in source
    source = source.replace("\nUSE_GLUON_SCAN = 1\n", "\nUSE_GLUON_SCAN = 2\n")
    for shape, warps, stages in (("bench", 4, 3), ("bench_h96", 16, 2)):
        r = compile_candidate("kda", source, shape, cache_dir=tmp_path)
        assert r.ok, r.errors
        scan = next(k for k in r.kernels if k.name == "kda_chunk_scan_gluon_kernel")
        assert scan.uses_wgmma and scan.uses_tma and scan.spill_bytes == 0, scan
        assert scan.num_warps == warps and scan.constexprs["STAGES"] == stages, scan
        assert not any(k.name == "kda_chunk_scan_kernel" for k in r.kernels)


@pytest.mark.parametrize(
    ("d", "dtype", "takes"),
    [
        (dims(1, 77, 2, 128, 128, 1), torch.bfloat16, True),  # one sequence: past T the TMA tile reads zeros
        (dims(2, 128, 2, 64, 64, 0), torch.bfloat16, True),
        (dims(2, 77, 2, 128, 128, 1), torch.bfloat16, False),  # a chunk would run into the next sequence
        (dims(1, 64, 2, 32, 32, 0), torch.bfloat16, False),  # K = 32: the state update's M below 64
        (dims(1, 64, 2, 128, 48, 0), torch.bfloat16, False),  # V not a multiple of 32
        (dims(1, 64, 2, 128, 128, 0), torch.float32, False),
        (dims(1, 0, 2, 128, 128, 0), torch.bfloat16, False),  # no tokens: nothing to walk
    ],
    ids=["one-sequence", "whole-chunks", "ragged-batch", "k32", "v48", "float32", "empty"],
)
def test_which_inputs_take_the_gluon_scan(tmp_path: Path, d: dict[str, int], dtype: torch.dtype,
                                          takes: bool) -> None:
    q = make_inputs(d, 0, "cpu", dtype)[0]
    assert not load_candidate(SOLUTION)._takes_gluon_scan(q, d["V"])  # never on the CPU by default
    forced = configured_variant(SOLUTION, tmp_path, USE_GLUON_SCAN=2)
    assert forced._takes_gluon_scan(q, d["V"]) is takes


def test_the_gluon_scan_fills_one_wave() -> None:
    """The value block is the narrowest whose programs fit the SMs (here the CPU's stand-in, 132)."""
    solution = load_candidate(SOLUTION)
    for (b, h, v), expected in {(1, 32, 128): (32, 3), (1, 96, 128): (128, 2), (2, 16, 128): (32, 3),
                                (1, 64, 128): (64, 2), (4, 96, 128): (128, 2), (1, 32, 96): (32, 3)}.items():
        q = torch.empty((b, 64, h, 128), dtype=torch.bfloat16)
        assert solution._gluon_scan_config(q, v) == expected, (b, h, v)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    ("d", "block_v"),
    [(dims(1, 200, 2, 128, 128, 1), bv) for bv in (32, 64, 128)]  # one sequence, its last chunk ragged
    + [(dims(2, 256, 3, 128, 128, 1), bv) for bv in (32, 64, 128)]  # two sequences of whole chunks
    + [(dims(1, 130, 2, 64, 64, 1), bv) for bv in (32, 64)]  # K = 64
    + [(dims(1, 40, 2, 128, 128, 1), None),  # one chunk: fewer than the stages
       (dims(1, 200, 2, 128, 96, 1), None),  # V = 96: three programs of 32 columns
       (dims(3, 128, 40, 128, 128, 0), None)],  # 480 value blocks: the automatic choice takes 128 columns
    ids=lambda x: f"bv{x}" if x is None or isinstance(x, int) else "B{B}-T{T}-H{H}-K{K}-V{V}".format(**x),
)
def test_gpu_gluon_scan_matches_the_reference_and_the_triton_scan(tmp_path: Path, d: dict[str, int],
                                                                 block_v: int | None) -> None:
    """Each value block of the Gluon scan (None: the automatic one): within tolerance of the reference, and close
    to the Triton scan on the same prep (the same products in another order: float32 sums differ in rounding)."""
    from tools import guard

    inputs = make_inputs(d, 0, "cuda", torch.bfloat16)
    outs = []
    for use in (1, 0):
        module = configured_variant(SOLUTION, tmp_path, USE_GLUON_SCAN=use, GLUON_SCAN_BV=block_v)
        assert module._takes_gluon_scan(inputs[0], d["V"]) is bool(use)
        if block_v is not None:
            assert module._gluon_scan_config(inputs[0], d["V"])[0] == block_v
        with guard.candidate_guard():
            outs.append(module.entry(*inputs))
    ref = PROBLEM.reference(*inputs)
    for name, o, t, r in zip(PROBLEM.output_names, *outs, ref):
        ok, err = within(o, r, PROBLEM.tolerance_for(name))
        assert ok, (name, err)
        assert torch.allclose(o.float(), t.float(), rtol=2e-2, atol=2e-3), (name, (o.float() - t.float()).abs().max())
