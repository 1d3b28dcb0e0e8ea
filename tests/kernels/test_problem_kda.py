"""The `kda` problem: its definition, the chunked form against the recurrence, the gate at its bound,
the starter under the Triton interpreter, and tolerances that pass correct kernels and fail buggy ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from kernels import get_problem
from kernels.kda import starter
from kernels.kda.problem import PROBLEM, make_inputs
from kernels.kda.reference import (
    CHUNK,
    chunked_reference,
    kda_gate,
    kda_recurrence,
    l2norm,
    recurrent_reference,
)
from kernels.spec import Problem, Tolerance

F32_MAX_EXP = math.log(torch.finfo(torch.float32).max)  # 88.72: exp() of more is inf in float32
# The starter runs under the interpreter on the CPU, compiled where a GPU is present (conftest).
KERNEL_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def within(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> tuple[bool, float]:
    """Tolerance's rule (kernels.spec): finite, relative Frobenius error and elementwise bound."""
    o, r = out.double(), ref.double()
    if o.shape != r.shape or not bool(torch.isfinite(o).all()):
        return False, math.inf
    rel = float((o - r).norm() / r.norm())
    elementwise = bool(((o - r).abs() <= tol.atol + tol.rtol * r.abs()).all())
    return rel <= tol.rel_err and elementwise, rel


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def dims(B: int, T: int, H: int, K: int, V: int, init: int) -> dict[str, int]:
    return {"B": B, "T": T, "H": H, "K": K, "V": V, "init": init}


# ---------------------------------------------------------------------------------------------
# Definition and inputs


def test_problem_is_registered_and_consistent() -> None:
    assert get_problem("kda") is PROBLEM
    assert isinstance(PROBLEM, Problem)
    described = PROBLEM.describe()
    assert described["outputs"] == ["o", "final_state"]
    assert described["gpu_dtype"] == "bfloat16" and described["cpu_dtype"] == "float32"
    assert {"bench", "bench_h96", "bench_b2", "small", "odd"} <= set(described["shapes"])
    assert PROBLEM.dims("bench") == dims(1, 8192, 32, 128, 128, 0)
    assert PROBLEM.tolerance_for("final_state") is not PROBLEM.tolerance
    assert {b.name for b in PROBLEM.baselines} == {"fla_chunk_kda", "torch_chunked"}
    # The cost model is per token and head: linear in B, T and H.
    base = dict(PROBLEM.dims("bench"))
    for key in ("B", "T", "H"):
        doubled = {**base, key: 2 * base[key]}
        assert PROBLEM.flops(doubled) == pytest.approx(2 * PROBLEM.flops(base))
    assert PROBLEM.bytes(base) > base["T"] * base["H"] * (3 * base["K"] + 2 * base["V"]) * 2 - 1


def test_make_inputs_deterministic_per_seed() -> None:
    d = PROBLEM.dims("small")
    a = make_inputs(d, 3, "cpu", torch.float32)
    b = make_inputs(d, 3, "cpu", torch.float32)
    c = make_inputs(d, 4, "cpu", torch.float32)
    assert len(a) == 8
    for x, y, z in zip(a, b, c):
        assert torch.equal(x, y)
        assert not torch.equal(x, z)
    no_init = make_inputs({**d, "init": 0}, 3, "cpu", torch.float32)
    assert no_init[7] is None


def test_make_inputs_shapes_dtypes_and_ranges() -> None:
    d = PROBLEM.dims("odd")
    B, T, H, K, V = (d[n] for n in ("B", "T", "H", "K", "V"))
    q, k, v, g_raw, beta, A_log, dt_bias, h0 = make_inputs(d, 0, "cpu", torch.float16)
    assert q.shape == k.shape == g_raw.shape == (B, T, H, K)
    assert v.shape == (B, T, H, V) and beta.shape == (B, T, H)
    assert A_log.shape == (H,) and dt_bias.shape == (H * K,) and h0.shape == (B, H, K, V)
    assert {x.dtype for x in (q, k, v, g_raw, beta)} == {torch.float16}
    assert {x.dtype for x in (A_log, dt_bias, h0)} == {torch.float32}
    assert bool((beta > 0).all() and (beta < 1).all())
    for x in (q, k, v, g_raw, beta, A_log, dt_bias, h0):
        assert bool((x != 0).any())
    assert bool((A_log >= 0).all() and (A_log <= math.log(16) + 1e-6).all())  # FLA's init range
    g = kda_gate(g_raw, A_log, dt_bias)
    assert bool((g >= -5).all() and (g <= 0).all())
    # Both regimes are exercised: channels at the bound and channels that keep memory.
    assert float((g < -4.5).float().mean()) > 0.05
    assert float((g > -0.1).float().mean()) > 0.05


def test_gate_formula_per_element() -> None:
    B, T, H, K = 1, 3, 2, 4
    gen = torch.Generator().manual_seed(0)
    g_raw = torch.randn(B, T, H, K, generator=gen)
    A_log = torch.randn(H, generator=gen)
    dt_bias = torch.randn(H * K, generator=gen)
    g = kda_gate(g_raw, A_log, dt_bias, dtype=torch.float64)
    for t, h, d in ((0, 0, 0), (2, 1, 3), (1, 1, 0)):
        x = math.exp(float(A_log[h])) * (float(g_raw[0, t, h, d]) + float(dt_bias[h * K + d]))
        assert float(g[0, t, h, d]) == pytest.approx(-5.0 / (1.0 + math.exp(-x)), rel=1e-12)


# ---------------------------------------------------------------------------------------------
# The chunked form


@pytest.mark.parametrize(
    "d",
    [
        PROBLEM.dims("small"),
        PROBLEM.dims("odd"),
        {**PROBLEM.dims("odd"), "init": 0},
        dims(1, 2 * CHUNK, 2, 16, 16, 1),  # whole chunks only
        dims(2, 5, 1, 8, 4, 1),  # shorter than one sub-block
    ],
    ids=["small", "odd", "odd-no-init", "whole-chunks", "tiny"],
)
def test_chunked_matches_recurrent_in_float64(d: dict[str, int]) -> None:
    inputs = make_inputs(d, 1, "cpu", torch.float32)
    o_rec, s_rec = recurrent_reference(*inputs, dtype=torch.float64)
    o_chk, s_chk = chunked_reference(*inputs, dtype=torch.float64)
    assert o_chk.shape == o_rec.shape == (d["B"], d["T"], d["H"], d["V"])
    assert s_chk.shape == s_rec.shape == (d["B"], d["H"], d["K"], d["V"])
    assert rel_err(o_chk, o_rec) < 1e-10
    assert rel_err(s_chk, s_rec) < 1e-10


def test_chunked_float32_is_close_to_float64() -> None:
    inputs = PROBLEM.inputs("small", 0, "cpu")
    o64, s64 = recurrent_reference(*inputs, dtype=torch.float64)
    o32, s32 = chunked_reference(*inputs)
    assert o32.dtype == s32.dtype == torch.float32
    assert rel_err(o32, o64) < 1e-5 and rel_err(s32, s64) < 1e-5


def _bound_inputs() -> tuple:
    """Inputs whose gate sits at the -5 bound for 160 steps, covering chunk 1 (64..127) whole."""
    d = dims(1, 3 * CHUNK + 10, 2, 16, 16, 1)
    q, k, v, g_raw, beta, A_log, dt_bias, h0 = make_inputs(d, 2, "cpu", torch.float32)
    g_raw = g_raw.clone()
    g_raw[:, 10:170] = 30.0
    return q, k, v, g_raw, beta, A_log, dt_bias, h0


def test_gate_at_bound_chunked_stays_finite_and_matches() -> None:
    inputs = _bound_inputs()
    g = kda_gate(inputs[3], inputs[5], inputs[6])
    assert float(g[:, CHUNK:2 * CHUNK].max()) <= -5.0 + 1e-5
    o64, s64 = recurrent_reference(*inputs, dtype=torch.float64)
    o32, s32 = chunked_reference(*inputs)
    assert bool(torch.isfinite(o32).all() and torch.isfinite(s32).all())
    assert rel_err(o32, o64) < 1e-5 and rel_err(s32, s64) < 1e-5


def test_gate_at_bound_overflows_an_uncentred_split() -> None:
    """With the centre at the chunk start, exp(c - G_j) needs e^315 (float32 tops out at e^88.7);
    a centre at the chunk's middle still needs e^155; sub-blocks of 16 need at most e^75."""
    inputs = _bound_inputs()
    G = kda_gate(inputs[3], inputs[5], inputs[6])[0, CHUNK:2 * CHUNK].cumsum(0)  # chunk 1: [C, H, K]
    chunk_start = float((G[0] - G).max())
    assert chunk_start > F32_MAX_EXP
    assert torch.isinf(torch.exp(G[0] - G)).any()
    sub_block_worst = max(float((G[s] - G[s:s + 16]).max()) for s in range(0, CHUNK, 16))
    assert sub_block_worst < F32_MAX_EXP
    for sub_chunk in (CHUNK, CHUNK // 2):  # centre at the chunk start, then at its middle
        o, _ = chunked_reference(*inputs, sub_chunk=sub_chunk)
        assert not bool(torch.isfinite(o).all()), sub_chunk


@pytest.mark.parametrize("t0", [40, CHUNK + 40])
def test_no_future_gate_leaks_into_earlier_outputs(t0: int) -> None:
    """Changing gates from t0 on must leave every earlier output bit for bit as it was: a centre
    taken from a later token would change their rounding."""
    inputs = list(make_inputs(dims(1, 2 * CHUNK, 2, 16, 16, 1), 5, "cpu", torch.float32))
    o1, _ = chunked_reference(*inputs)
    inputs[3] = inputs[3].clone()
    inputs[3][:, t0:] = 30.0
    o2, _ = chunked_reference(*inputs)
    assert torch.equal(o1[:, :t0], o2[:, :t0])
    assert not torch.equal(o1[:, t0:], o2[:, t0:])


# ---------------------------------------------------------------------------------------------
# The starter in float32: under the interpreter on the CPU, compiled on a GPU


@pytest.mark.parametrize(
    ("d", "seed"),
    [
        (PROBLEM.dims("small"), 0),
        (PROBLEM.dims("small"), 1),
        (PROBLEM.dims("odd"), 0),
        (PROBLEM.dims("odd"), 1),
        ({**PROBLEM.dims("odd"), "init": 0}, 0),
    ],
    ids=["small-0", "small-1", "odd-0", "odd-1", "odd-no-init"],
)
def test_starter_passes_tolerance(d: dict[str, int], seed: int) -> None:
    check_float32_kernel(starter.entry, make_inputs(d, seed, KERNEL_DEVICE, torch.float32))


def check_float32_kernel(entry: Callable[..., Any], inputs: tuple, max_err: float = 1e-5) -> None:
    """A kernel run in float32 is within the tolerance, far inside it (max_err), and leaves its inputs as they were."""
    before = [x.clone() if x is not None else None for x in inputs]
    out = entry(*inputs)
    ref = PROBLEM.reference(*inputs)
    assert out[0].dtype == inputs[0].dtype and out[1].dtype == torch.float32
    for name, o, r in zip(PROBLEM.output_names, out, ref):
        ok, err = within(o, r, PROBLEM.tolerance_for(name))
        assert ok, (name, err)
        assert err < max_err, (name, err)  # float32 all the way: far inside the bf16 tolerance
    for x, y in zip(inputs, before):
        assert (x is None and y is None) or torch.equal(x, y)


# ---------------------------------------------------------------------------------------------
# The tolerance rejects plausible bugs


def _output_before_update(q_hat, k_hat, v, g, beta, h0):
    """o_t read from the decayed state before the delta update: a plausible ordering bug."""
    B, T, H, K = k_hat.shape
    S = h0.clone() if h0 is not None else torch.zeros(B, H, K, v.shape[-1])
    o = torch.empty(B, T, H, v.shape[-1])
    for t in range(T):
        S = S * g[:, t].exp().unsqueeze(-1)
        o[:, t] = torch.einsum("bhk,bhkv->bhv", q_hat[:, t], S)
        kS = torch.einsum("bhk,bhkv->bhv", k_hat[:, t], S)
        S = S + k_hat[:, t].unsqueeze(-1) * (beta[:, t, :, None] * (v[:, t] - kS)).unsqueeze(-2)
    return o, S


def test_plausible_bugs_fail_tolerance() -> None:
    inputs = PROBLEM.inputs("small", 0, "cpu")
    q, k, v, g_raw, beta, A_log, dt_bias, h0 = inputs
    H, K = q.shape[-2:]
    o_ref, s_ref = PROBLEM.reference(*inputs)
    q_hat, k_hat = l2norm(q) * K**-0.5, l2norm(k)
    g = kda_gate(g_raw, A_log, dt_bias)
    unbounded = -A_log.exp().view(H, 1) * F.softplus(g_raw + dt_bias.view(H, K))  # FLA's other gate
    no_a = -5.0 * torch.sigmoid(g_raw + dt_bias.view(H, K))
    bugs = {
        "output before update": _output_before_update(q_hat, k_hat, v, g, beta, h0),
        "gate without the -5 bound": kda_recurrence(q_hat, k_hat, v, unbounded, beta, h0),
        "gate without exp(A_log)": kda_recurrence(q_hat, k_hat, v, no_a, beta, h0),
        "initial state ignored": kda_recurrence(q_hat, k_hat, v, g, beta, None),
        "no scale": kda_recurrence(q_hat / K**-0.5, k_hat, v, g, beta, h0),
    }
    # The correct recurrence through the same helpers passes (the bugs are the only difference).
    ok, _ = within(kda_recurrence(q_hat, k_hat, v, g, beta, h0)[0], o_ref, PROBLEM.tolerance_for("o"))
    assert ok
    for name, (o, _) in bugs.items():
        ok, err = within(o, o_ref, PROBLEM.tolerance_for("o"))
        assert not ok, (name, err)
    transposed = s_ref.transpose(-1, -2).contiguous()  # K == V at "small": only the values differ
    assert not within(transposed, s_ref, PROBLEM.tolerance_for("final_state"))[0]
    # Rounding o to bfloat16 alone stays well inside.
    assert within(o_ref.bfloat16(), o_ref, PROBLEM.tolerance_for("o"))[0]


# ---------------------------------------------------------------------------------------------
# Baselines


def test_torch_chunked_baseline_matches_and_keeps_dtype() -> None:
    inputs = make_inputs(PROBLEM.dims("odd"), 0, "cpu", torch.float16)
    o, s = PROBLEM.baseline("torch_chunked").fn(*inputs)
    assert o.dtype == torch.float16 and s.dtype == torch.float32
    o_ref, s_ref = PROBLEM.reference(*inputs)
    assert within(o, o_ref, PROBLEM.tolerance_for("o"))[0]
    assert within(s, s_ref, PROBLEM.tolerance_for("final_state"))[0]


def test_fla_baseline_says_why_it_cannot_run() -> None:
    reason = PROBLEM.baseline("fla_chunk_kda").available()
    if not torch.cuda.is_available():
        assert isinstance(reason, str) and reason


# ---------------------------------------------------------------------------------------------
# On a GPU: bfloat16 inputs, realistic head size


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["starter", "torch_chunked"])
def test_gpu_bf16_candidates_pass_at_mid(name: str) -> None:
    inputs = PROBLEM.inputs("mid", 0, "cuda")
    assert inputs[0].dtype == torch.bfloat16
    fn = starter.entry if name == "starter" else PROBLEM.baseline(name).fn
    out = fn(*inputs)
    ref = PROBLEM.reference(*inputs)
    assert out[0].dtype == torch.bfloat16
    for out_name, o, r in zip(PROBLEM.output_names, out, ref):
        assert within(o, r, PROBLEM.tolerance_for(out_name))[0], out_name


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_fla_baseline_computes_the_same_problem() -> None:
    baseline = PROBLEM.baseline("fla_chunk_kda")
    reason = baseline.available()
    if reason:
        pytest.skip(reason)
    inputs = PROBLEM.inputs("mid", 0, "cuda")
    out = baseline.fn(*inputs)
    ref = PROBLEM.reference(*inputs)
    for out_name, o, r in zip(PROBLEM.output_names, out, ref):
        ok, err = within(o, r, PROBLEM.tolerance_for(out_name))
        assert ok and err < 1e-2, (out_name, err)
