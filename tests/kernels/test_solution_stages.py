"""Each Triton stage of the two project solutions, launched alone and checked against the reference's torch functions.

The whole-`entry()` tests (test_solution_kda.py, test_solution_mla_decode.py) say that the stages
together are right; these say which stage is wrong when they are not. Every kernel is launched as `entry()`
launches it (the same grid, buffers, strides and constexprs, read from the solution's module constants), on
inputs from the problem's own generator at its smallest shapes, with every *input* of the stage computed by
the reference in float64 and rounded to the buffer's dtype, so a stage is checked on its own, not on the error
its predecessor left. The reference of each output is computed in float64 from those same rounded inputs.

KDA (kernels/kda/solution.py; the Gluon prep and scan run only on a Hopper GPU and are not launched here):
  kda_gate_cumsum_kernel      G, the within-chunk cumulative gate (GATE_APART)
  kda_chunk_prep_full_kernel  Qg, Kd, Aqk, e^G_last, Akk (its own buffer) and beta k e^G (in W's buffer)
  kda_chunk_solve_kernel      W (over beta k e^G) and U, the UT transform
  kda_chunk_scan_kernel       o and the final state
MLA decode (kernels/mla_decode/solution.py; the Gluon split kernel runs only on a Hopper GPU):
  mla_split_kernel            each split's normalised partial output and base-2 log-sum-exp (or, with one split,
                              the output itself: DIRECT_OUT)
  mla_combine_kernel          the merge of the splits by their log-sum-exp

Tolerances. On the CPU the inputs are float32 (the problems' cpu_dtype), so every `.to(dt)` in the kernels is
exact and each stage is float32 arithmetic on float32 inputs: a correct stage is within a few float32 ulps of
its float64 reference, scaled by how many terms a value sums and how much the stage amplifies its inputs'
rounding. Each bound below is stated as `Bound(atol, rtol)` (elementwise |out - ref| <= atol + rtol |ref|, as
kernels.spec.Tolerance) plus a relative Frobenius bound, with the measured error and the reason next to it:
about 5-40x above what a correct kernel shows over 8 seeds, and well below what the bugs this file was tried
with give (each bound's comment names them; none of those experiments is left in the file).

bfloat16 (the GPU dtype) runs only where a stage has no tl.dot: Triton 3.6's interpreter computes tl.dot on bf16
operands from their raw uint16 storage (off by ~1e10), so a bf16 prep, solve, scan or split cannot run on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from kernels.kda.problem import PROBLEM as KDA
from kernels.kda.reference import CHUNK, chunked_reference, intra_chunk_scores, kda_gate, l2norm, recurrent_reference
from kernels.mla_decode.problem import PROBLEM as MLA
from kernels.mla_decode.reference import D_LATENT, SOFTMAX_SCALE
from kernels.mla_decode.reference import reference as mla_reference
from tests.candidates import interpreted, load_candidate

ROOT = Path(__file__).resolve().parents[2]
F64 = torch.float64
SEED = 0  # the problems' inputs are drawn from this seed (the bounds were measured over seeds 0-7)

pytestmark = interpreted


@dataclass(frozen=True)
class Bound:
    """|out - ref| <= atol + rtol * |ref| elementwise, and ||out - ref|| / ||ref|| <= rel (Frobenius)."""

    atol: float
    rtol: float
    rel: float


def assert_close(name: str, out: torch.Tensor, ref: torch.Tensor, bound: Bound) -> None:
    o, r = out.detach().to(F64), ref.detach().to(F64)
    assert o.shape == r.shape, (name, tuple(o.shape), tuple(r.shape))
    assert bool(torch.isfinite(o).all()), (name, "non-finite values")
    diff = (o - r).abs()
    excess = diff - (bound.atol + bound.rtol * r.abs())
    rel = float((o - r).norm() / r.norm()) if float(r.norm()) > 0 else float(diff.max())
    worst = int(excess.argmax())
    assert float(excess.max()) <= 0 and rel <= bound.rel, (
        f"{name}: rel_err {rel:.3e} (bound {bound.rel:g}); max |diff| {float(diff.max()):.3e}; "
        f"{int((excess > 0).sum())} of {o.numel()} elements outside atol={bound.atol:g} rtol={bound.rtol:g}, "
        f"worst at flat index {worst}: out {float(o.flatten()[worst]):.6e} ref {float(r.flatten()[worst]):.6e}")


# =====================================================================================================================
# KDA


@pytest.fixture(scope="module")
def kda() -> ModuleType:
    return load_candidate(ROOT / "kernels" / "kda" / "solution.py")


KdaInputs = tuple[Any, ...]


def _kda_inputs(case: str, dtype: torch.dtype = torch.float32) -> KdaInputs:
    """The problem's inputs at its smallest shapes (float32, the CPU dtype): `odd` (B = 2, T = 77: a whole chunk
    and a ragged one of 13 rows, H = 3, K = 16 != V = 32) and `small` (T = 100, K = V = 32); `bound` is `odd` with
    every gate at its -5 bound from token 10 on (G reaches -320 in the first chunk: the re-centred column factors
    reach e^75, as in test_solution_kda.py's gate-at-bound test); `repeat` is `odd` with every key near one
    direction, slow gates and beta in (0.5, 1), so Akk's entries approach 1 and the solve's nilpotent series has
    large terms (random keys leave Akk small: there a solve that drops a term of the series still passes)."""
    if case == "bound":
        q, k, v, g_raw, beta, A_log, dt_bias, h0 = KDA.inputs("odd", SEED, "cpu", dtype)
        g_raw = g_raw.clone()
        g_raw[:, 10:] = 50.0  # exact in bf16 too
        return q, k, v, g_raw, beta, A_log, dt_bias, h0
    if case == "repeat":
        q, k, v, g_raw, beta, A_log, dt_bias, h0 = KDA.inputs("odd", SEED, "cpu", dtype)
        k = (k[:, :1] + 0.1 * k).to(dtype)  # every key close to its head's first: Akk's entries near beta
        H, K = g_raw.shape[-2:]
        # exp(A_log) (g_raw + dt_bias) = -7 + noise: g ~ -5 sigmoid(-7) = -0.005, so e^(G_i - G_j) stays near 1
        g_raw = (-7.0 / A_log.exp().view(H, 1) - dt_bias.view(H, K) + 0.1 * g_raw.float()).to(dtype)
        beta = (0.5 + 0.5 * beta.float()).to(dtype)  # in (0.5, 1)
        return q, k, v, g_raw, beta, A_log, dt_bias, h0
    return KDA.inputs(case, SEED, "cpu", dtype)


KDA_CASES = ["odd", "small", "bound", "repeat"]
# float32 is the problems' CPU dtype: every stage runs in it. bfloat16 (the GPU dtype) only where a stage has no
# tl.dot (the gate and the MLA combine): Triton 3.6's interpreter multiplies bf16 tl.dot operands as their raw uint16
# storage (a 16x16 bf16 tl.dot comes out ~1e10 off), so a bf16 prep, solve, scan or split cannot be checked on the CPU.
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])


def _chunks(x: torch.Tensor, n: int) -> torch.Tensor:
    """[B, T, H, ...] -> [B, H, N, C, ...], T zero-padded to N * C (as reference._to_chunks)."""
    B, T, H = x.shape[:3]
    x = torch.cat([x, x.new_zeros(B, n * CHUNK - T, H, *x.shape[3:])], dim=1)
    return x.view(B, n, CHUNK, H, *x.shape[3:]).movedim(3, 1)


def _tokens(x: torch.Tensor, T: int) -> torch.Tensor:
    """[B, H, N, C, ...] -> [B, T, H, ...] (the kernels' token-major layout), padding rows dropped; always a copy (a
    view could share memory with `x`, and the solve writes W over its input)."""
    B, H, N, C = x.shape[:4]
    return x.movedim(1, 3).reshape(B, N * C, H, *x.shape[4:])[:, :T].clone(memory_format=torch.contiguous_format)


def _per_chunk(x: torch.Tensor) -> torch.Tensor:
    """[B, H, N, ...] -> [B, N, H, ...]: the layout of decay_last [B, NT, H, K] and Akk [B, NT, H, 64, 64]."""
    return x.movedim(1, 2).clone(memory_format=torch.contiguous_format)


def kda_stage_reference(inputs: KdaInputs, G: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Every intermediate of the chunked form in float64, from reference.py's functions, chunked [B, H, N, C, *].

    The same algebra as chunked_reference (which keeps these local): G = the within-chunk cumsum of kda_gate
    (or `G` given: what the prep was fed), Aqk / Akk from intra_chunk_scores, masked causal / strictly lower,
    Akk scaled by beta by row; (I + Akk) [W | U] = Diag(beta) [K e^G | V]; Qg = q_hat e^G (q_hat carries the
    K^-0.5 scale), Kd = k_hat e^(G_last - G), decay = e^G_last [B, H, N, K]. Padding rows (t >= T) have k = q = 0,
    beta = 0 and g = 0, so G there is G_last, the value the kernels use.
    """
    q, k, v, g_raw, beta, A_log, dt_bias, _ = inputs
    K = q.shape[-1]
    N = -(-q.shape[1] // CHUNK)
    q_hat = _chunks(l2norm(q, F64) * K**-0.5, N)
    k_hat = _chunks(l2norm(k, F64), N)
    bc = _chunks(beta.to(F64), N).unsqueeze(-1)  # [B, H, N, C, 1]
    if G is None:
        G = _chunks(kda_gate(g_raw, A_log, dt_bias, dtype=F64), N).cumsum(-2)
    G_last = G[..., -1, :]
    qk, kk = intra_chunk_scores(q_hat, k_hat, G)
    i = torch.arange(CHUNK)
    causal = i.view(-1, 1) >= i.view(1, -1)
    strict = i.view(-1, 1) > i.view(1, -1)
    Akk = torch.where(strict, kk, 0.0) * bc
    bkg = bc * k_hat * G.exp()
    bv = bc * _chunks(v.to(F64), N)
    return {
        "G": G, "Aqk": torch.where(causal, qk, 0.0), "Akk": Akk, "bkg": bkg, "bv": bv,
        "Qg": q_hat * G.exp(), "Kd": k_hat * (G_last.unsqueeze(-2) - G).exp(), "decay": G_last.exp(),
    }


def unit_lower_solve(akk: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """(I + Akk)^-1 rhs in float64, Akk strictly lower [..., 64, 64]: the solve chunked_reference does."""
    eye = torch.eye(CHUNK, dtype=F64)
    return torch.linalg.solve_triangular(akk.to(F64) + eye, rhs.to(F64), upper=False, unitriangular=True)


def scan_reference(W: torch.Tensor, U: torch.Tensor, Qg: torch.Tensor, Kd: torch.Tensor, Aqk: torch.Tensor,
                   decay: torch.Tensor, h0: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """chunked_reference's loop over chunks in float64, on given intermediates (chunked [B, H, N, C, *]; decay
    [B, H, N, K]): V' = U - W S; O = Qg S + Aqk V'; S <- Diag(decay) S + Kdᵀ V'. Returns (o [B, H, N, C, V], S)."""
    B, H, N, _, K = W.shape
    V = U.shape[-1]
    S = torch.zeros(B, H, K, V, dtype=F64) if h0 is None else h0.to(F64).clone()
    o = torch.empty(B, H, N, CHUNK, V, dtype=F64)
    for n in range(N):
        v_new = U[:, :, n].to(F64) - W[:, :, n].to(F64) @ S
        o[:, :, n] = Qg[:, :, n].to(F64) @ S + Aqk[:, :, n].to(F64) @ v_new
        S = decay[:, :, n].to(F64).unsqueeze(-1) * S + Kd[:, :, n].to(F64).transpose(-1, -2) @ v_new
    return o, S


def _pow2(n: int) -> int:
    """triton.next_power_of_2, as entry() sizes its blocks (max(16, next_power_of_2(K)) and the like)."""
    return 1 << (n - 1).bit_length()


# --- 1a. The gate and its within-chunk cumulative sum (float32 G from either input dtype: the kernel upcasts g_raw,
# and its reference takes that same g_raw, upcast, so one bound serves both).
# Measured over seeds 0-7 (every case, both dtypes): max |diff| 8.6e-5 where |G| reaches 288-320 (float32's ulp there
# is 3e-5: a 64-term cumsum carries a few ulps), rel_err <= 5.4e-7 (the largest at `repeat`, where G is small).
# Bound: rtol 4e-6 (about 30 ulps of |G|) with atol 1e-5 for the sigmoid's absolute error near G = 0: the worst
# element at 11% of it; rel_err 5e-6 (11%). Tried: dt_bias outside exp(A_log) (rel_err 0.47) and an exclusive cumsum
# (G off by one row's g: max |diff| 5) fail by orders of magnitude.
GATE_BOUND = Bound(atol=1e-5, rtol=4e-6, rel=5e-6)


@DTYPES
@pytest.mark.parametrize("case", KDA_CASES)
def test_kda_gate_cumsum_kernel(kda: ModuleType, case: str, dtype: torch.dtype) -> None:
    inputs = _kda_inputs(case, dtype)
    q, _, _, g_raw, _, A_log, dt_bias, _ = inputs
    B, T, H, K = q.shape
    NT = -(-T // CHUNK)
    bk_gate = min(kda.GATE_BK, max(16, _pow2(K)))
    G = torch.full((B, T, H, K), math.nan, dtype=torch.float32)  # every row < T is written: NaN shows a gap
    kda.kda_gate_cumsum_kernel[(NT, B * H, -(-K // bk_gate))](
        g_raw, A_log, dt_bias, G, T, H, K=K, BK=bk_gate, LOWER=kda.LOWER_BOUND, num_warps=kda.NUM_WARPS_GATE,
    )
    assert_close("G", G, _tokens(kda_stage_reference(inputs)["G"], T), GATE_BOUND)


# --- 1b. The prep. Its reference takes the same float32 inputs, upcast.
# With GATE_APART = 1 the prep is fed the float64 reference G rounded to float32 (what kda_gate_cumsum_kernel
# writes) and its reference takes that rounded G: the prep is checked apart from the gate kernel. With GATE_APART = 0
# the prep forms G itself from g_raw, in float32, against the float64 G.
# float32, G fed: what is left is the prep's own float32 arithmetic (the L2 norms; exponentials of differences of G
# up to 75, each carrying its argument's rounding, ulp(75) = 8e-6, as relative error; 64-term score sums). Measured
# over seeds 0-7: max |diff| <= 6.4e-7 (Akk; the values are <= 1), rel_err <= 4.4e-7. Bound atol 5e-6, rtol 1e-5,
# rel 5e-6: the worst element at 10% of it, rel_err at 9%.
# float32, G formed inside: e^(G_i - G_j) also carries G's own float32 rounding (up to 8.6e-5 at |G| ~ 300, see
# the gate), which the score sums pass on as absolute error up to that times |k_i||k_j| <= 1, cancellation and all.
# Measured: max |diff| 6.3e-6 (Kd), 4.2e-6 (Akk), rel_err <= 2.8e-6. Bound atol 5e-5, rtol 1e-4, rel 5e-5 (7%, 6%).
# Tried (gate apart): the diagonal kept in Akk, rel_err 4; the L2 norm's eps at 1e-3 in place of 1e-6, rel_err
# 5.6e-5 in Kd (11x over); Kd scaled by 1 + 1e-4, rel_err 1e-4 (20x over).
PREP_BOUND = Bound(atol=5e-6, rtol=1e-5, rel=5e-6)
PREP_GATE_BOUND = Bound(atol=5e-5, rtol=1e-4, rel=5e-5)


@pytest.mark.parametrize("gate_apart", [1, 0], ids=["gate-apart", "gate-in-prep"])
@pytest.mark.parametrize("case", KDA_CASES)
def test_kda_chunk_prep_full_kernel(kda: ModuleType, case: str, gate_apart: int) -> None:
    inputs = _kda_inputs(case)
    dtype = inputs[0].dtype
    q, k, _, g_raw, beta, A_log, dt_bias, _ = inputs
    B, T, H, K = q.shape
    NT = -(-T // CHUNK)
    if gate_apart:
        G = kda_stage_reference(inputs)["G"].to(torch.float32)
        g_in = _tokens(G, T)
        ref = kda_stage_reference(inputs, G=G.to(F64))
        bound = PREP_BOUND
    else:
        g_in = g_raw
        ref = kda_stage_reference(inputs)
        bound = PREP_GATE_BOUND

    def buffer(*shape: int, dt: torch.dtype = dtype) -> torch.Tensor:
        return torch.full(shape, math.nan, dtype=dt)  # NaN where the kernel writes nothing

    w, qg, kd = buffer(B, T, H, K), buffer(B, T, H, K), buffer(B, T, H, K)
    aqk = buffer(B, T, H, CHUNK)
    decay = buffer(B, NT, H, K, dt=torch.float32)
    akk = buffer(B, NT, H, CHUNK, CHUNK, dt=dtype if kda.AKK_BF16 else torch.float32)
    kda.kda_chunk_prep_full_kernel[(NT, B * H)](
        q, k, g_in, beta, A_log, dt_bias, w, qg, kd, aqk, decay, akk, T, H, NT, K**-0.5, K=K, BK=max(16, _pow2(K)),
        LOWER=kda.LOWER_BOUND, EPS=kda.L2NORM_EPS, GATE_APART=bool(gate_apart), num_warps=kda.NUM_WARPS_PREP,
        maxnreg=kda.MAXNREG_PREP_FULL,
    )
    # Layouts, from the kernel's stores: Qg = q_hat e^G (q_hat scaled by K^-0.5), Kd = k_hat e^(G_last - G) and, in
    # W's buffer for the solve, beta k_hat e^G, all token-major [B, T, H, K] like q; Aqk token-major [B, T, H, 64],
    # token t holding row t % 64 of its chunk's causal scores (diagonal kept); e^G_last float32 [B, NT, H, K], G_last
    # at the chunk's last valid row; Akk [B, NT, H, 64, 64], one whole tile a chunk and head (rows past T zero, as
    # beta is there), strictly lower and already scaled by its row's beta: beta_i sum_d k_id k_jd e^(G_id - G_jd),
    # i > j.
    assert_close("Qg", qg, _tokens(ref["Qg"], T), bound)
    assert_close("Kd", kd, _tokens(ref["Kd"], T), bound)
    assert_close("beta k e^G (W's buffer)", w, _tokens(ref["bkg"], T), bound)
    assert_close("Aqk", aqk, _tokens(ref["Aqk"], T), bound)
    assert_close("e^G_last", decay, _per_chunk(ref["decay"]), bound)
    assert_close("Akk", akk, _per_chunk(ref["Akk"]), bound)


# --- 2. The solve. Fed the reference's Akk and beta k e^G rounded to float32 (the buffers' dtype on the CPU); its
# reference is the float64 triangular solve (chunked_reference's) of those same rounded values, with beta v exact.
# float32: the kernel forms (I + Akk)^-1 in ten float32 products (a nilpotent series, exact in exact arithmetic),
# each a 64-term sum, then W and U; their rounding scales with the series' terms. With the problem's random keys Akk
# is small (|D^8| ~ 1e-6): measured over seeds 0-7, max |diff| 1.4e-8 (W, |W| <= 0.5), 2.3e-7 (U, |U| <= 3.4),
# rel_err <= 3.7e-8. Bound atol 2e-6, rtol 1e-5, rel 1e-6: the worst element at 2.4% of it, rel_err at 4%.
# `repeat` (Akk up to 0.97) makes the series' terms large (|D^4| ~ 130, |D^8| ~ 450, cancelling to an inverse of
# entries <= 1), and float32's rounding of those terms leaves max |diff| 4.6e-5 in W and 2.6e-4 in U (|U| <= 4.9),
# rel_err <= 5e-5: its bound is atol 1e-3, rtol 1e-3, rel 5e-4 (worst at 29% and 10%).
# Tried: the series without its I + D^8 factor passes at the random-key cases but fails `repeat` by 10 orders of
# magnitude (W ~ 2e10); the block-lower correction without its N^2 term fails both (rel_err 5e-4 at odd, 0.8 at
# `repeat`).
SOLVE_BOUND = Bound(atol=2e-6, rtol=1e-5, rel=1e-6)
SOLVE_BOUND_REPEAT = Bound(atol=1e-3, rtol=1e-3, rel=5e-4)


@pytest.mark.parametrize("case", KDA_CASES)
def test_kda_chunk_solve_kernel(kda: ModuleType, case: str) -> None:
    inputs = _kda_inputs(case)
    q, _, v, _, beta, _, _, _ = inputs
    B, T, H, K = q.shape
    V = v.shape[-1]
    NT = -(-T // CHUNK)
    dtype = q.dtype
    bk, v_pad = max(16, _pow2(K)), max(16, _pow2(V))
    ref = kda_stage_reference(inputs)
    akk = _per_chunk(ref["Akk"]).to(dtype if kda.AKK_BF16 else torch.float32)
    bkg = ref["bkg"].to(dtype)
    w = _tokens(bkg, T)  # the solve reads beta k e^G from W's buffer and writes W over it
    u = torch.full((B, T, H, V), math.nan, dtype=dtype)
    kda.kda_chunk_solve_kernel[(NT, B * H)](
        akk, beta, v, w, u, T, H, NT, K=K, V=V, BK=bk, V_PAD=v_pad, INV_PRECISION=kda.INV_PRECISION,
        num_warps=kda.NUM_WARPS_SOLVE if min(bk, v_pad) >= 64 else kda.SOLVE_WARPS_SMALL_N,
        maxnreg=kda.MAXNREG_SOLVE,
    )
    wu = unit_lower_solve(akk.movedim(2, 1), torch.cat([bkg.to(F64), ref["bv"]], dim=-1))  # Akk back to [B, H, N, ..]
    bound = SOLVE_BOUND_REPEAT if case == "repeat" else SOLVE_BOUND
    assert_close("W", w, _tokens(wu[..., :K], T), bound)
    assert_close("U", u, _tokens(wu[..., K:], T), bound)


# --- 3. The scan. Fed the reference's W, U, Qg, Kd, Aqk (from kda_stage_reference and its float64 solve) and
# e^G_last, rounded to float32, with the problem's initial state (or none); its reference is
# chunked_reference's loop (scan_reference) in float64 on those same rounded values. That loop on the unrounded
# intermediates is asserted to reproduce chunked_reference and recurrent_reference (float64, to 1e-10), so the
# stage reference is the problem's definition.
# float32: two chunks (T <= 100) of 64-term products onto a state of rms ~1 (the N(0, 1) initial state). Measured
# over seeds 0-7: max |diff| 1.6e-7 (o, |o| <= 0.6), 4.3e-7 (S, |S| <= 4), rel_err <= 1.0e-7. Bound atol 2e-6,
# rtol 1e-5, rel 1e-6 (`repeat` included: S up to 3.3, max |diff| 4.8e-7): the worst element at 14%, rel_err
# at 20%. Tried: the state's decay 1e-4 short, rel_err 3.7e-5 in o (37x over); o read from the updated state, 0.31.
SCAN_BOUND = Bound(atol=2e-6, rtol=1e-5, rel=1e-6)


@pytest.mark.parametrize("init", [1, 0], ids=["initial-state", "zero-state"])
@pytest.mark.parametrize("case", KDA_CASES)
def test_kda_chunk_scan_kernel(kda: ModuleType, case: str, init: int) -> None:
    inputs = _kda_inputs(case)
    if not init:
        inputs = (*inputs[:7], None)
    q, _, v, _, _, _, _, h0 = inputs
    B, T, H, K = q.shape
    V = v.shape[-1]
    NT = -(-T // CHUNK)
    dtype = q.dtype
    ref = kda_stage_reference(inputs)
    wu = unit_lower_solve(ref["Akk"], torch.cat([ref["bkg"], ref["bv"]], dim=-1))
    exact = (wu[..., :K], wu[..., K:], ref["Qg"], ref["Kd"], ref["Aqk"])
    o_exact, s_exact = scan_reference(*exact, ref["decay"], h0)
    q_, k_, v_, g_, b_, a_, d_, h_ = inputs
    o_chk, s_chk = chunked_reference(q_, k_, v_, g_, b_, a_, d_, h_, dtype=F64)
    o_rec, s_rec = recurrent_reference(q_, k_, v_, g_, b_, a_, d_, h_, dtype=F64)
    for got, want in ((_tokens(o_exact, T), o_chk), (s_exact, s_chk), (o_chk, o_rec), (s_chk, s_rec)):
        assert float((got - want).abs().max()) < 1e-10

    w, u, qg, kd, aqk = (x.to(dtype) for x in exact)
    decay = ref["decay"].to(torch.float32)
    o = torch.full((B, T, H, V), math.nan, dtype=dtype)
    final_state = torch.full((B, H, K, V), math.nan, dtype=torch.float32)
    block_v = max(16, min(kda.BV, _pow2(V)))
    kda.kda_chunk_scan_kernel[(-(-V // block_v), B * H)](
        _tokens(w, T), _tokens(u, T), _tokens(qg, T), _tokens(kd, T), _tokens(aqk, T), _per_chunk(decay),
        h0 if h0 is not None else final_state, o, final_state, T, H, NT,
        K=K, V=V, BK=max(16, _pow2(K)), BLOCK_V=block_v, HAS_INITIAL_STATE=h0 is not None,
        num_warps=kda.NUM_WARPS, num_stages=kda.NUM_STAGES,
    )
    o_ref, s_ref = scan_reference(w, u, qg, kd, aqk, decay, h0)
    assert_close("o", o, _tokens(o_ref, T), SCAN_BOUND)
    assert_close("final_state", final_state, s_ref, SCAN_BOUND)


# =====================================================================================================================
# MLA decode


@pytest.fixture(scope="module")
def mla() -> ModuleType:
    return load_candidate(ROOT / "kernels" / "mla_decode" / "solution.py")


def split_reference(q: torch.Tensor, kv: torch.Tensor, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention over cache tokens [start, end) only, in float64 as reference.py's: (the normalised output
    [B, H, 512], the base-2 log-sum-exp of the scaled scores [B, H]), what one split of mla_split_kernel writes."""
    q64, kv64 = q.to(F64), kv[:, start:end].to(F64)
    scores = torch.bmm(q64, kv64.transpose(1, 2)) * SOFTMAX_SCALE
    out = torch.bmm(torch.softmax(scores, dim=-1), kv64[..., :D_LATENT])
    return out, torch.logsumexp(scores, dim=-1) / math.log(2.0)


def _split_launch(mla: ModuleType, q: torch.Tensor, kv: torch.Tensor, tokens_per_split: int, num_splits: int,
                  part: torch.Tensor, lse: torch.Tensor, out: torch.Tensor, direct: bool) -> None:
    """mla_split_kernel exactly as entry() launches it."""
    B, H, _ = q.shape
    S = kv.shape[1]
    grid = (num_splits, B * -(-H // mla.BLOCK_H))
    mla.mla_split_kernel[grid](
        q, kv, part, lse, out, S, H, tokens_per_split, num_splits, mla.SOFTMAX_SCALE * mla.LOG2E,
        q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), out.stride(0), out.stride(1),
        D_LATENT=mla.D_LATENT, D_ROPE=mla.D_ROPE, BLOCK_H=mla.BLOCK_H, BLOCK_N=mla.BLOCK_N, DIRECT_OUT=direct,
        num_warps=mla.NUM_WARPS, num_stages=mla.NUM_STAGES,
    )


# The split kernel. float32: scores of 576 terms (rms 1.7, up to ~8), a base-2 online softmax (exp2 of float32
# differences: relative error ~ |x| ulp), 64-token P.V sums of |c_kv| ~ 1. Measured over seeds 0-7: partials max
# |diff| 2.4e-6 (|partial| up to 3.4), rel_err <= 7.5e-7; LSE (base 2, 3 to 10) max |diff| 2.7e-6, rel 1.6e-7.
# Bounds: partials atol 1e-5, rtol 1e-5, rel 1e-5 (worst at 18% and 8%); LSE atol 1e-5, rtol 1e-6, rel 1e-6 (18%,
# 16%).
# Tried: a split reading one token of the next split (rel_err 0.18), the LSE in natural units (0.31), the scale
# 1e-4 too large (rel_err 1.3e-4 in the partials: 13x over; the direct output likewise).
PARTIAL_BOUND = Bound(atol=1e-5, rtol=1e-5, rel=1e-5)
LSE_BOUND = Bound(atol=1e-5, rtol=1e-6, rel=1e-6)


@pytest.mark.parametrize("shape", ["odd", "small"])
def test_mla_split_kernel_partials_and_lse(mla: ModuleType, shape: str) -> None:
    """Each split's partial and LSE against attention over just that split's tokens. odd: B = 3, H = 8 (one head
    block of 64, 56 heads masked), S = 77: two splits of 64 tokens, the second of 13; small: B = 2, H = 16, S = 200:
    four splits of 64, the last of 8 (split_plan at the H200's 132 SMs, as entry() plans on the CPU)."""
    q, kv = MLA.inputs(shape, SEED, "cpu")
    B, H, _ = q.shape
    S = kv.shape[1]
    tokens_per_split, num_splits = mla.split_plan(B, H, S, 132)
    assert num_splits >= 2 and S % tokens_per_split, "the shape should give several splits, the last one ragged"
    part_dtype = q.dtype if mla.PARTIAL_BF16 else torch.float32
    # Layouts, from _write_split: partials [B, H, num_splits, 512], normalised (acc / l); lse [B, H, num_splits] in
    # base 2 (m + log2 l over scores scaled by SOFTMAX_SCALE * log2 e), i.e. logsumexp(scores) / ln 2.
    part = torch.full((B, H, num_splits, D_LATENT), math.nan, dtype=part_dtype)
    lse = torch.full((B, H, num_splits), math.nan, dtype=torch.float32)
    out = torch.full((B, H, D_LATENT), math.nan, dtype=q.dtype)  # not written with DIRECT_OUT = False
    _split_launch(mla, q, kv, tokens_per_split, num_splits, part, lse, out, direct=False)
    assert bool(torch.isnan(out).all())
    for s in range(num_splits):
        p_ref, lse_ref = split_reference(q, kv, s * tokens_per_split, min((s + 1) * tokens_per_split, S))
        assert_close(f"partial of split {s}", part[:, :, s], p_ref, PARTIAL_BOUND)
        assert_close(f"lse of split {s}", lse[:, :, s], lse_ref, LSE_BOUND)


def test_mla_split_kernel_direct_out(mla: ModuleType) -> None:
    """One split of the whole cache (entry()'s path when num_splits == 1: B > 264 on the H200): the kernel writes
    the normalised output itself, here S = 77 tokens in two tiles, against the whole reference; a partial's bound
    (the same arithmetic over two tiles: measured rel_err <= 8e-7, max |diff| 2.6e-6)."""
    q, kv = MLA.inputs("odd", SEED, "cpu")
    B, H, _ = q.shape
    out = torch.full((B, H, D_LATENT), math.nan, dtype=q.dtype)
    _split_launch(mla, q, kv, kv.shape[1], 1, out, out, out, direct=True)  # entry(): part = lse = out
    assert_close("direct output", out, mla_reference(q, kv)[0], PARTIAL_BOUND)


# The combine: out = sum_s w_s part_s with w = softmax over the splits of lse (base 2), per (batch, head), columns in
# blocks of COMBINE_BLOCK_D. Fed exact partials and LSEs (float64 per-split attention, rounded to the partials' dtype
# and to float32), so it should give the whole attention up to the rounding of those inputs and of a num_splits-term
# weighted sum. float32, measured over seeds 0-7: max |diff| 3.6e-7, rel_err <= 1.6e-7; bound atol 1e-6, rtol 1e-5,
# rel 1e-6 (worst at 20%, 16%); a 1e-3 error in one split's weight is 300x over it. bfloat16: the partials rounded
# to bf16 and the output too (two half-ulps: up to one bf16 ulp, 2^-6 at |out| ~ 2), and the merged output's norm
# is below the partials' (they partly cancel), so its relative error is larger than one rounding's: measured
# rel_err <= 3.8e-3, max |diff| 1.9e-2 at |out| ~ 2.1; bound atol 1e-2, rtol 2e-2 (five bf16 ulps relative), rel
# 1e-2 (worst at 37% and 38%). bf16 cannot see a 1e-3 weight error (measured: passes); weights in natural units
# (exp for exp2) are 0.13 off in either dtype.
COMBINE_BOUND = {torch.float32: Bound(atol=1e-6, rtol=1e-5, rel=1e-6),
                 torch.bfloat16: Bound(atol=1e-2, rtol=2e-2, rel=1e-2)}


@DTYPES
@pytest.mark.parametrize(("shape", "tokens_per_split"), [("odd", None), ("small", None), ("odd", 26)],
                         ids=["odd-plan", "small-plan", "odd-3-splits"])
def test_mla_combine_kernel(mla: ModuleType, shape: str, tokens_per_split: int | None, dtype: torch.dtype) -> None:
    """The merge of exact partials against the full reference. Split counts: the plan's (2 at odd, 4 at small) and 3
    splits of 26 tokens at odd (BLOCK_S = 4: one masked split lane)."""
    q, kv = MLA.inputs(shape, SEED, "cpu", dtype)
    B, H, _ = q.shape
    S = kv.shape[1]
    if tokens_per_split is None:
        tokens_per_split, num_splits = mla.split_plan(B, H, S, 132)
    else:
        num_splits = -(-S // tokens_per_split)
    part_dtype = q.dtype if mla.PARTIAL_BF16 else torch.float32
    parts, lses = zip(*(split_reference(q, kv, s * tokens_per_split, min((s + 1) * tokens_per_split, S))
                        for s in range(num_splits)))
    part = torch.stack(parts, dim=2).to(part_dtype).contiguous()  # [B, H, num_splits, 512]
    lse = torch.stack(lses, dim=2).to(torch.float32).contiguous()  # [B, H, num_splits]
    out = torch.full((B, H, D_LATENT), math.nan, dtype=q.dtype)
    mla.mla_combine_kernel[(B * H, mla.D_LATENT // mla.COMBINE_BLOCK_D)](
        part, lse, out, H, num_splits, out.stride(0), out.stride(1),
        D_LATENT=mla.D_LATENT, BLOCK_D=mla.COMBINE_BLOCK_D, BLOCK_S=_pow2(num_splits),
        num_warps=mla.COMBINE_NUM_WARPS,
    )
    assert_close("combined output", out, mla_reference(q, kv)[0], COMBINE_BOUND[dtype])
