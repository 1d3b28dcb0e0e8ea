"""The MLA decode problem: inputs, reference, tolerance, cost model, baselines, and its starter.

CPU tests run the starter under the Triton interpreter in float32 (its bf16 tl.dot and arithmetic
are unreliable). The tolerance is checked both ways on bf16 inputs with plain torch on the CPU: it
admits emulations of correct bf16 kernels and rejects plausible bugs, given as perturbations of
the reference and as edited copies of the starter (real Triton kernels). GPU tests run compiled.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from kernels import get_problem, starter_path
from kernels.mla_decode.problem import D_LATENT, D_QK, D_ROPE, SOFTMAX_SCALE
from kernels.spec import compare
from tests.candidates import interpreted, load_candidate, starter_variant

PROBLEM = get_problem("mla_decode")
SEEDS = (0, 1, 2)
CHECK_SHAPES = ("small", "odd")
# The starter runs on CPU tensors only under the interpreter (conftest picks it where there is no GPU).
BF16 = torch.bfloat16


@pytest.fixture(scope="module")
def starter() -> ModuleType:
    return load_candidate(starter_path("mla_decode"))


def check(out: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> dict:
    (ref,) = PROBLEM.reference(q, kv)
    return compare(out, ref, PROBLEM.tolerance)


# --- the starter ---------------------------------------------------------------------------------


@interpreted
@pytest.mark.parametrize("shape", CHECK_SHAPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_starter_is_correct(starter: ModuleType, shape: str, seed: int) -> None:
    q, kv = PROBLEM.inputs(shape, seed, "cpu")
    q_before, kv_before = q.clone(), kv.clone()
    out = starter.entry(q, kv)
    result = check(out, q, kv)
    assert result["ok"], result
    dims = PROBLEM.dims(shape)
    assert out.shape == (dims["B"], dims["H"], D_LATENT) and out.dtype == q.dtype
    assert torch.equal(q, q_before) and torch.equal(kv, kv_before), "the starter modified its inputs"


def test_starter_uses_the_problem_scale(starter: ModuleType) -> None:
    assert starter.SOFTMAX_SCALE == SOFTMAX_SCALE == 1 / math.sqrt(192)
    for name in ("BLOCK_N", "NUM_WARPS"):
        assert isinstance(getattr(starter, name), int), f"{name} should be a module-level constant"


def test_check_shapes_have_a_partial_tile() -> None:
    assert set(CHECK_SHAPES) <= set(PROBLEM.check_shapes)
    for name in PROBLEM.check_shapes:
        assert PROBLEM.dims(name)["S"] % 16, f"{name}: S is a multiple of 16, so tails go untested"


# --- inputs --------------------------------------------------------------------------------------


def test_make_inputs_is_deterministic_varied_and_never_zero() -> None:
    q, kv = PROBLEM.inputs("small", 0, "cpu")
    q2, kv2 = PROBLEM.inputs("small", 0, "cpu")
    q3, kv3 = PROBLEM.inputs("small", 1, "cpu")
    dims = PROBLEM.dims("small")
    assert q.shape == (dims["B"], dims["H"], D_QK) and kv.shape == (dims["B"], dims["S"], D_QK)
    assert q.dtype == kv.dtype == PROBLEM.cpu_dtype
    assert torch.equal(q, q2) and torch.equal(kv, kv2)
    assert not torch.equal(q, q3) and not torch.equal(kv, kv3)
    assert bool((q != 0).all()) and bool((kv != 0).all())
    qb, kvb = PROBLEM.inputs("small", 0, "cpu", BF16)
    assert qb.dtype == kvb.dtype == BF16 and bool((qb != 0).all()) and bool((kvb != 0).all())


@pytest.mark.parametrize("shape", ["small", "odd"])
def test_attention_is_neither_flat_nor_one_hot(shape: str) -> None:
    q, kv = PROBLEM.inputs(shape, 0, "cpu")
    scores = torch.bmm(q.double(), kv.double().transpose(1, 2)) * SOFTMAX_SCALE
    assert 1.0 < float(scores.std()) < 3.0
    top = torch.softmax(scores, dim=-1).amax(dim=-1)
    s = kv.shape[1]
    assert bool((top > 3 / s).all()) and bool((top < 0.9).all()) and float(top.median()) < 0.5
    # The rope part carries a real share of the score, so dropping it is visible.
    rope = torch.bmm(q[..., D_LATENT:].double(), kv[..., D_LATENT:].double().transpose(1, 2)) * SOFTMAX_SCALE
    assert float(rope.std()) > 0.2 * float(scores.std())


# --- the reference -------------------------------------------------------------------------------


def test_reference_matches_the_naive_per_head_form() -> None:
    """Un-absorb: per head, keys W_UK c_kv (+ k_rope) and values W_UV c_kv of width 128, explicit exp/sum.

    With q_nope_absorbed = W_UKᵀ q_nope, the absorbed output projected by W_UV equals the naive one.
    """
    gen = torch.Generator().manual_seed(7)
    b, h, s, d_nope, d_v = 2, 3, 37, 128, 128
    q_nope = torch.randn(b, h, d_nope, generator=gen, dtype=torch.float64)
    q_rope = torch.randn(b, h, D_ROPE, generator=gen, dtype=torch.float64)
    c_kv = torch.randn(b, s, D_LATENT, generator=gen, dtype=torch.float64)
    k_rope = torch.randn(b, s, D_ROPE, generator=gen, dtype=torch.float64)
    w_uk = torch.randn(h, d_nope, D_LATENT, generator=gen, dtype=torch.float64) / math.sqrt(D_LATENT)
    w_uv = torch.randn(h, d_v, D_LATENT, generator=gen, dtype=torch.float64) / math.sqrt(D_LATENT)

    naive = torch.empty(b, h, d_v, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            k = torch.cat([c_kv[bi] @ w_uk[hi].T, k_rope[bi]], dim=-1)  # (s, 192)
            v = c_kv[bi] @ w_uv[hi].T  # (s, 128)
            qh = torch.cat([q_nope[bi, hi], q_rope[bi, hi]])
            scores = (k @ qh) / math.sqrt(d_nope + D_ROPE)
            e = torch.exp(scores - scores.max())
            naive[bi, hi] = (e / e.sum()) @ v

    q_abs = torch.einsum("bhn,hnc->bhc", q_nope, w_uk)
    q = torch.cat([q_abs, q_rope], dim=-1).float()
    kv = torch.cat([c_kv, k_rope], dim=-1).float()
    (latent_out,) = PROBLEM.reference(q, kv)
    assert latent_out.dtype == torch.float32 and latent_out.shape == (b, h, D_LATENT)
    absorbed = torch.einsum("bhc,hvc->bhv", latent_out.double(), w_uv)
    assert float((absorbed - naive).norm() / naive.norm()) < 1e-5


# --- the tolerance, both ways --------------------------------------------------------------------


def _round(x: torch.Tensor) -> torch.Tensor:
    return x.to(BF16).float()


def _scores(q: torch.Tensor, kv: torch.Tensor, scale: float = SOFTMAX_SCALE) -> torch.Tensor:
    return torch.bmm(q.float(), kv.float().transpose(1, 2)) * scale


def _output_rounded(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return _round(PROBLEM.reference(q, kv)[0])


def _p_rounded(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """fp32 scores and softmax, unnormalised P rounded to bf16 for the P.V product, bf16 output."""
    s = _scores(q, kv)
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return _round(torch.bmm(_round(e), kv.float()[..., :D_LATENT]) / e.sum(-1, keepdim=True))


def _split_kv(q: torch.Tensor, kv: torch.Tensor, splits: int = 8) -> torch.Tensor:
    """Split-KV: per-split outputs stored in bf16 with an fp32 log-sum-exp, merged in fp32."""
    size = math.ceil(kv.shape[1] / splits)
    parts, lses = [], []
    for start in range(0, kv.shape[1], size):
        chunk = kv[:, start:start + size]
        s = _scores(q, chunk)
        m = s.amax(-1, keepdim=True)
        e = torch.exp(s - m)
        l = e.sum(-1, keepdim=True)
        parts.append(_round(torch.bmm(_round(e), chunk.float()[..., :D_LATENT]) / l))
        lses.append(m + l.log())
    weights = torch.softmax(torch.stack(lses), dim=0)
    return _round((torch.stack(parts) * weights).sum(0))


def _q_prescaled(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """q multiplied by scale*log2(e) and rounded to bf16 before the dot, exp2 softmax."""
    qs = _round(q.float() * (SOFTMAX_SCALE * math.log2(math.e)))
    s = _scores(qs, kv, 1.0)
    e = torch.exp2(s - s.amax(-1, keepdim=True))
    return _round(torch.bmm(_round(e), kv.float()[..., :D_LATENT]) / e.sum(-1, keepdim=True))


@pytest.mark.parametrize("variant", [_output_rounded, _p_rounded, _split_kv, _q_prescaled])
@pytest.mark.parametrize("shape", CHECK_SHAPES)
def test_tolerance_admits_correct_bf16_kernels(variant: Callable, shape: str) -> None:
    for seed in (0, 1):
        q, kv = PROBLEM.inputs(shape, seed, "cpu", BF16)
        result = check(variant(q, kv), q, kv)
        assert result["ok"], result
        # ...with room to spare: a quarter of the budget would have failed these.
        assert result["rel_err"] < PROBLEM.tolerance.rel_err / 2


def _attend(q: torch.Tensor, kv: torch.Tensor, v: torch.Tensor, scale: float = SOFTMAX_SCALE) -> torch.Tensor:
    p = torch.softmax(torch.bmm(q.double(), kv.double().transpose(1, 2)) * scale, dim=-1)
    return torch.bmm(p, v.double()).float()


def _scale_576(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return _attend(q, kv, kv[..., :D_LATENT], 1 / math.sqrt(D_QK))


def _no_rope(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return _attend(q[..., :D_LATENT], kv[..., :D_LATENT], kv[..., :D_LATENT])


def _tail_skipped(block_n: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def bug(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        full = kv.shape[1] // block_n * block_n
        assert 0 < full < kv.shape[1], "this shape has no partial tile for this block"
        return _attend(q, kv[:, :full], kv[:, :full, :D_LATENT])

    bug.__name__ = f"tail_skipped_{block_n}"
    return bug


def _v_last_512(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return _attend(q, kv, kv[..., D_QK - D_LATENT:])


def _v_with_rope_cut_short(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    # V as all 576 columns, with the rope columns written over the end of the latent.
    return _attend(q, kv, torch.cat([kv[..., :D_LATENT - D_ROPE], kv[..., D_LATENT:]], dim=-1))


def _one_head_wrong(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    out = PROBLEM.reference(q, kv)[0].clone()
    out[-1, -1] = out[-1, 0]  # e.g. a head index off by one in the last program
    return out


BUGS = [_scale_576, _no_rope, _tail_skipped(16), _tail_skipped(64), _v_last_512, _v_with_rope_cut_short,
        _one_head_wrong]


@pytest.mark.parametrize("bug", BUGS, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("shape", CHECK_SHAPES)
def test_tolerance_rejects_plausible_bugs(bug: Callable, shape: str) -> None:
    for seed in (0, 1):
        q, kv = PROBLEM.inputs(shape, seed, "cpu", BF16)
        result = check(bug(q, kv), q, kv)
        assert not result["ok"], (seed, result)


@interpreted
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("SOFTMAX_SCALE = 1.0 / math.sqrt(128 + 64)", "SOFTMAX_SCALE = 1.0 / math.sqrt(576)"),
        (" + tl.sum(k_rope * q_rope[None, :], axis=1)", ""),
        ("for start in range(0, S, BLOCK_N):", "for start in range(0, S - BLOCK_N + 1, BLOCK_N):"),
        ("acc = acc * alpha + tl.sum", "acc = acc + tl.sum"),
    ],
    ids=["scale_576", "no_rope", "tail_skipped", "acc_not_rescaled"],
)
def test_wrong_triton_kernels_fail(tmp_path: Path, old: str, new: str) -> None:
    wrong = starter_variant("mla_decode", tmp_path, old, new)
    q, kv = PROBLEM.inputs("odd", 0, "cpu")
    assert not check(wrong.entry(q, kv), q, kv)["ok"]


# --- baselines and the cost model ----------------------------------------------------------------


def test_torch_baseline_matches_reference_on_cpu() -> None:
    baseline = PROBLEM.baseline("torch")
    assert baseline.available() is None
    for shape in CHECK_SHAPES:
        q, kv = PROBLEM.inputs(shape, 0, "cpu")
        result = check(baseline.fn(q, kv), q, kv)
        assert result["ok"], (shape, result)
        assert result["rel_err"] < 1e-5  # float32 throughout on the CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answer")
def test_torch_compile_baseline_says_why_it_cannot_run() -> None:
    baseline = PROBLEM.baseline("torch_compile")
    assert baseline.needs_gpu
    reason = baseline.available()
    assert reason is not None and "GPU" in reason


def test_cost_model_scales_with_size() -> None:
    base = {"B": 2, "H": 16, "S": 100}
    assert PROBLEM.flops(base) > 0 and PROBLEM.bytes(base) > 0
    # FLOPs are linear in each of B, H and S.
    for key in ("B", "H", "S"):
        assert PROBLEM.flops({**base, key: 3 * base[key]}) == pytest.approx(3 * PROBLEM.flops(base))
    # Bytes: linear in B; the cache dominates and does not grow with H.
    assert PROBLEM.bytes({**base, "B": 6}) == pytest.approx(3 * PROBLEM.bytes(base))
    bench = PROBLEM.dims("bench")
    cache = bench["S"] * D_QK * 2
    assert cache < PROBLEM.bytes(bench) < 1.02 * cache
    assert PROBLEM.bytes(bench) / 4.24e12 == pytest.approx(2.2e-6, rel=0.05)  # the DRAM floor
    assert PROBLEM.flops(bench) > 2 * bench["H"] * bench["S"] * (D_QK + D_LATENT)


def test_describe_lists_shapes_and_baselines() -> None:
    info = PROBLEM.describe()
    assert info["gpu_dtype"] == "bfloat16" and info["cpu_dtype"] == "float32"
    assert {"bench", "bench_b64", "small", "odd"} <= set(info["shapes"])
    assert [b["name"] for b in info["baselines"]] == ["torch", "torch_compile"]
    for needle in ("1/sqrt(192)", "1/sqrt(576)", "9.4 MB", "2.2 us"):
        assert needle in PROBLEM.description


# --- on a GPU ------------------------------------------------------------------------------------

gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("shape", ["bench", "bench_b64", "small", "odd"])
def test_starter_on_gpu(starter: ModuleType, shape: str) -> None:
    q, kv = PROBLEM.inputs(shape, 0, "cuda")
    assert q.dtype == kv.dtype == BF16
    out = starter.entry(q, kv)
    assert out.dtype == BF16
    result = check(out, q, kv)
    assert result["ok"], result


@pytest.mark.parametrize("name", ["torch", "torch_compile"])
@pytest.mark.parametrize("shape", ["bench", "bench_b64", "odd"])
def test_baselines_on_gpu(name: str, shape: str) -> None:
    baseline = PROBLEM.baseline(name)
    assert baseline.available() is None, baseline.available()
    q, kv = PROBLEM.inputs(shape, 0, "cuda")
    result = check(baseline.fn(q, kv), q, kv)
    assert result["ok"], result


for _test in (test_starter_on_gpu, test_baselines_on_gpu):
    for _mark in gpu:
        _mark(_test)
