"""The `kda` problem: Kimi Delta Attention, chunked forward (what Kimi Linear's KDA layer runs).

Definition (DESIGN.md §9; references in reference.py), FLA's layout [B, T, H, K]:
inputs q, k [B, T, H, K], v [B, T, H, V], g_raw [B, T, H, K] (gate pre-activations),
beta [B, T, H] in (0, 1), A_log [H] float32, dt_bias [H * K] float32, initial_state
[B, H, K, V] float32 or None. Outputs o [B, T, H, V] in the input dtype and the final state
[B, H, K, V] float32. This is exactly FLA 0.6.0's `chunk_kda(q, k, v, g_raw, beta,
initial_state=..., output_final_state=True, use_qk_l2norm_in_kernel=True,
use_gate_in_kernel=True, safe_gate=True, lower_bound=-5, A_log=A_log, dt_bias=dt_bias)`.

What the tolerance rejects (figures next to TOLERANCE; tests in tests/kernels/test_problem_approximations.py): the
inputs give a quarter of each head's channels memories of 10^2 to 10^4 tokens (make_inputs), so a kernel
that does not carry the state across the whole sequence fails: the state rebuilt from the last 128, 512 or
2048 tokens misses o's rel_err bound by 41x, 30x and 15x at bench (and at mid, T = 1000, by 64x and 41x).
The keys of a head correlate (a short causal convolution and a shared direction, as a trained layer's do),
so the within-chunk solve cannot be cut short: its Neumann series of one to three terms misses by 12x to
22x at bench and by 2.5x or more at mid and odd. The gate and ordering bugs miss by 15x and more. The check
shapes small and odd are shorter than any history window: mid and the bench shapes are where a bounded
history shows. Not rejected, as no cheaper in time: e^G_last held in bf16, a state rounded to bf16 between
chunks (both within FLA's own error).
"""

from __future__ import annotations

import importlib.util
import math
import os

import torch

from kernels.draws import Draws, GeneratorDraws
from kernels.kda.reference import CHUNK, chunked_reference, recurrent_reference
from kernels.spec import Baseline, Dims, Inputs, Problem, Tolerance

DESCRIPTION = """\
Kimi Delta Attention (KDA) forward, as Kimi Linear's KDA layer hands it to its kernel.

entry(q, k, v, g_raw, beta, A_log, dt_bias, initial_state) -> (o, final_state)
  q, k   [B, T, H, K]  bfloat16 on the GPU (float32 on the CPU)
  v      [B, T, H, V]
  g_raw  [B, T, H, K]  raw gate pre-activations
  beta   [B, T, H]     in (0, 1), already through a sigmoid
  A_log  [H] float32;  dt_bias [H * K] float32
  initial_state [B, H, K, V] float32, or None (then the state starts at zero)
  o [B, T, H, V] in q's dtype;  final_state [B, H, K, V] float32

Per batch and head, with the state S (K x V, keep it in float32):
  q, k <- q / sqrt(|q|^2 + 1e-6), k / sqrt(|k|^2 + 1e-6)     (L2 norm of each head vector)
  g_t  = -5 * sigmoid(exp(A_log[h]) * (g_raw_t + dt_bias[h*K:(h+1)*K]))   per channel, in (-5, 0)
  S_t  = (I - beta_t k_t k_tᵀ) Diag(exp(g_t)) S_{t-1} + beta_t k_t v_tᵀ
  o_t  = S_tᵀ (K^-0.5 q_t)                 decay first, then the delta rule; o reads the new state

Fast path: the chunked form (chunks of 64 tokens, UT transform of the within-chunk delta rule,
tensor-core matmuls, one sequential pass over chunks for the state). Re-centre the cumulative gate
inside the chunk before splitting exp(G_i - G_j) = exp(G_i - c) exp(c - G_j): at the -5 bound a
centre at the chunk start overflows float32 after 18 steps. See kernels/kda/reference.py
(`chunked_reference`) for the whole algorithm in torch. T need not be a multiple of 64; K and V
may differ (check shapes use K=16, V=32). Layout is contiguous [B, T, H, *].

Inputs: a quarter of each head's key channels decay slowly (median g from -1e-4 to -1e-2) and the keys
seldom write them, so what the state holds from thousands of tokens back still shapes o and the final
state: a kernel must carry the state across the whole sequence (one scan over the chunks); rebuilding
each chunk's state from a bounded window of history fails the check at mid and bench. The keys of a head
are correlated (cosine about 0.8, 0.95 between neighbours) and beta is mostly above 0.5, so the within-chunk
delta rule needs its exact solve: a truncated series for (I + A)^-1 fails the check.
"""

# Shapes. `init` says whether an initial state is passed (1) or None (0).
SHAPES: dict[str, Dims] = {
    "bench": {"B": 1, "T": 8192, "H": 32, "K": 128, "V": 128, "init": 0},
    "bench_h96": {"B": 1, "T": 8192, "H": 96, "K": 128, "V": 128, "init": 0},
    "bench_b2": {"B": 2, "T": 16384, "H": 16, "K": 128, "V": 128, "init": 0},
    # Head size as in the model, an initial state, T not a multiple of 64: a GPU-scale check.
    "mid": {"B": 2, "T": 1000, "H": 4, "K": 128, "V": 128, "init": 1},
    "small": {"B": 1, "T": 100, "H": 2, "K": 32, "V": 32, "init": 1},
    # Odd sizes: T prime and not a multiple of 64, H odd, K != V (a transposed state shows).
    "odd": {"B": 2, "T": 77, "H": 3, "K": 16, "V": 32, "init": 1},
}


# Long-memory channels (make_inputs). Today's gate alone forgets every channel within about 128 tokens
# (dt_bias ~ N(0, 0.5^2) puts most channels far from 0 or at the -5 bound), so a kernel that rebuilt each
# chunk's state from two chunks back, with no scan over the sequence, matched the reference. Slow gates alone
# do not fix that: the delta rule erases too. With L2-normalised isotropic keys, (I - beta k kᵀ) removes a
# share (2 beta - beta^2) / K of a state column's energy per token, ~1/180 at K = 128, so the state forgets
# within ~360 tokens whatever the gate (measured: g = 0 everywhere, T = 4096, K = 128: history cut to 2048
# tokens is off by only 2e-3 in o). A trained model that holds information for thousands of tokens must
# therefore keep it in channels its keys seldom write, and decay them slowly: that is what these are.
SLOW_FRACTION = 0.25  # per head, this share of the K channels (picked at random per head) has long memory
# Their median gate g is drawn log-uniform in [-SLOW_G_MAX, -SLOW_G_MIN]: memories of 1/|g| = 100 to 10^4
# tokens, so each of the windows a shortcut might keep (128, 512, 2048 tokens) falls short of some channels.
SLOW_G_MIN, SLOW_G_MAX = 1e-4, 1e-2
# Their keys are scaled by this before the L2 norm: the erasure of a channel goes with its key energy, so at
# K = 128 these channels forget through the delta rule only over ~10^4 tokens (2 / ((2b - b^2) * 0.15^2 / 97)).
SLOW_KEY_SCALE = 0.15
# Correlated keys, as a trained layer's are (its keys pass a short causal convolution, and the keys of one head
# share a direction), and betas nearer 1. With isotropic keys and beta ~ sigmoid(N(0, 1)) the within-chunk
# products k_i . k_j are ~K^-0.5 and the UT solve (I + A)^-1 is nearly I - A: a Neumann series cut at one term
# passed at bench (RELIABILITY.md, "KDA's intra-chunk solve"). Here two keys of a head meet at cosine 0.8 far
# apart and 0.95 / 0.90 / 0.85 at lags 1 / 2 / 3, and the median beta is 0.73, so every term of the series counts.
KEY_CONV = 4  # taps of the causal box filter over the key noise (Kimi Linear's ShortConvolution width)
KEY_SHARED = 2.0  # weight of the direction shared by a head's keys: cosine KEY_SHARED^2 / (1 + KEY_SHARED^2) = 0.8
BETA_MU = 1.0  # beta = sigmoid(N(BETA_MU, 1))


def make_inputs(dims: Dims, seed: int, device: str, dtype: torch.dtype | None) -> Inputs:
    """Random inputs in realistic ranges, deterministic per (seed, device).

    q, v ~ N(0, 1); k correlated (_correlated_keys: unit variance per channel, cosine ~0.8 between two keys of
    a head, 0.95 between neighbours); beta = sigmoid(N(BETA_MU, 1)); A_log = log U(1, 16) as FLA's KDA layer
    initialises it.
    Per head, three quarters of the channels are fast: g_raw ~ N(0, 1), dt_bias ~ N(0, 0.5^2) (the layer
    starts it at zero; trained ones are not): they forget within tens of steps and many sit near the -5
    bound, so the bound and the re-centring are exercised. The other quarter (SLOW_FRACTION, random
    channels per head) carries long memory: dt_bias puts the median gate at -5 sigmoid(x) = -gamma with
    gamma log-uniform in [1e-4, 1e-2], g_raw there has standard deviation 1 / exp(A_log) (the gate's
    argument exp(A_log) (g_raw + dt_bias) varies by +-1 around its median, so g stays in (-5, 0) and
    per token within a factor ~e of its median), and k is scaled by 0.15 there, so the delta rule seldom
    erases them either (see SLOW_KEY_SCALE). With these, the state carried across the whole sequence
    matters: history cut to the last 2048 tokens is off by ~0.2 in o at T = 4096.
    """
    return _draw_inputs(dims, GeneratorDraws(seed, device), dtype or torch.bfloat16)


def refill_inputs(buffers: list[torch.Tensor | None], dims: Dims, draws: Draws) -> None:
    """A timed rep's inputs: make_inputs' recipe from the rep's draws, copied into the buffers."""
    dtype = next(b.dtype for b in buffers if b is not None)
    for buf, value in zip(buffers, _draw_inputs(dims, draws, dtype)):
        if buf is not None and value is not None:
            buf.copy_(value)


def _draw_inputs(dims: Dims, draws: Draws, dtype: torch.dtype) -> Inputs:
    B, T, H, K, V = (int(dims[n]) for n in ("B", "T", "H", "K", "V"))
    device = draws.device

    def randn(*shape: int) -> torch.Tensor:
        return draws.normal_(torch.empty(*shape, device=device, dtype=torch.float32))

    def rand(*shape: int) -> torch.Tensor:
        return draws.uniform_(torch.empty(*shape, device=device, dtype=torch.float32))

    q = randn(B, T, H, K).to(dtype)
    k = randn(B, T, H, K)
    v = randn(B, T, H, V).to(dtype)
    g_raw = randn(B, T, H, K)
    beta = torch.sigmoid(randn(B, T, H) + BETA_MU).to(dtype)
    A_log = draws.uniform_(torch.empty(H, device=device, dtype=torch.float32), 1.0, 16.0).log()
    dt_bias = randn(H, K) * 0.5
    # Long-memory channels: the SLOW_FRACTION of each head's channels with the lowest random rank.
    rank = rand(H, K).argsort(dim=-1).argsort(dim=-1)
    slow = rank < max(1, round(SLOW_FRACTION * K))
    u = rand(H, K)
    gamma = torch.exp(math.log(SLOW_G_MIN) + (math.log(SLOW_G_MAX) - math.log(SLOW_G_MIN)) * u)
    a = A_log.exp().view(H, 1)
    x_median = torch.log(gamma / 5.0) - torch.log1p(-gamma / 5.0)  # sigmoid(x_median) = gamma / 5
    dt_bias = torch.where(slow, x_median / a, dt_bias).reshape(H * K)
    g_raw = torch.where(slow, g_raw / a, g_raw).to(dtype)
    initial_state = randn(B, H, K, V) if dims.get("init", 0) else None
    # Drawn last, so that every other input is what the isotropic keys' recipe drew.
    k = _correlated_keys(k, randn(B, KEY_CONV - 1, H, K), randn(B, 1, H, K), slow).to(dtype)
    return q, k, v, g_raw, beta, A_log, dt_bias, initial_state


def _correlated_keys(noise: torch.Tensor, history: torch.Tensor, shared: torch.Tensor,
                     slow: torch.Tensor) -> torch.Tensor:
    """Keys from N(0, 1) noise [B, T, H, K]: a causal box filter of KEY_CONV taps over the noise (history: the
    KEY_CONV - 1 draws before token 0), back to unit variance, plus KEY_SHARED times one direction per (batch,
    head) that every token shares; the long-memory channels then scaled by SLOW_KEY_SCALE. A few shifted adds,
    no loop over tokens: a timed rep's refill stays a few dozen device ops."""
    T = noise.shape[1]
    padded = torch.cat([history, noise], dim=1)
    k = padded[:, :T].clone()
    for lag in range(1, KEY_CONV):
        k += padded[:, lag:lag + T]
    k = k / math.sqrt(KEY_CONV) + KEY_SHARED * shared
    return torch.where(slow, k * SLOW_KEY_SCALE, k)


def reference(*inputs: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrent form in float32: o and final_state, both float32."""
    return recurrent_reference(*inputs)  # type: ignore[arg-type]


# Tolerances, derived on the inputs above (long-memory channels, correlated keys) from three sets of figures, all
# against the float32 recurrent reference on bf16 inputs, H200, 2026-12-02, `benchmarks/tolerances.py` (max over
# seeds: 8 at odd, 2 at mid and bench; raw in benchmarks/results/h200-20261202/). Reference at the shapes: o rms
# 0.0085 (bench) to 0.13 (odd), max 0.12-0.74; final state rms 0.099 (bench, from zero) to 0.49 (odd; the N(0, 1)
# initial state stays in the slow channels), max 1.4-3.4.
# 1. The floor, the reference's own float32 error against float64: o 1.0e-5 at bench, 6.4e-6 at mid, 5.9e-7 at
#    odd; the state 1.4e-5 at bench. Every bound below is 700x or more above it.
# 2. Exact algorithms in bf16, which must pass with room. o rel_err: rounding o to bf16 alone (the starter,
#    torch_chunked) 1.66e-3; the project's solution 3.1e-3 (mid), 3.6e-3 (odd), 5.3e-3 (bench); FLA's chunk_kda
#    3.5e-3, 3.8e-3 and 5.8e-3; the bf16-operand emulation in tests/kernels/test_problem_approximations.py 3.0e-3,
#    3.2e-3 and 4.5e-3. State rel_err: solution 1.8e-3, 2.4e-3 and 4.4e-3 (bench); FLA 2.0e-3, 2.5e-3 and 5.0e-3.
#    The atol each needs at rtol 2e-2, o: FLA 2.7e-3 and the solution 2.1e-3 at odd (K = 16: the largest |o|),
#    <= 5.7e-4 at mid and bench; state: the solution 9.2e-3 and FLA 7.5e-3 at odd, FLA 7.6e-3 and the solution
#    6.2e-3 at bench, <= 4.3e-3 at mid. The correlated keys raised these over the isotropic keys' (state need
#    5.2e-3, o rel_err 4.8e-3 at most): the within-chunk solve now does real work, and its bf16 rounding shows.
# 3. Shortcuts, which must fail by a wide margin. History cut to the last W tokens (no scan across the sequence),
#    at bench: W = 128 rel_err 0.49 (o) / 0.55 (state), W = 512 0.37 / 0.42, W = 2048 0.18 / 0.24; at mid (T =
#    1000) W = 128 0.77 / 0.94, W = 512 0.49 / 0.93. The within-chunk solve (I + A)^-1 cut to its Neumann series
#    of 1, 2 or 3 terms (the kernel's 64 x 64 inverse skipped), at bench: o 0.26 / 0.16 / 0.15, state 0.26 / 0.17 /
#    0.16; at mid o 0.077 / 0.048 / 0.037; at odd o 0.18-0.22. With isotropic keys the one-term series passed at
#    bench (within-chunk k_i . k_j ~ K^-0.5 made A small); the solution with its inverse so cut is now `incorrect`
#    there (rel_err 0.26 and 0.18 for one and three terms, benchmarks/results/h200-20261202/). Plausible bugs
#    (measured on the isotropic inputs, CPU): the gate without its -5 bound or without exp(A_log) 0.95-0.98, no
#    initial state 0.93-0.96, o read before the delta update 0.15-0.28, no scale 3-10, a transposed state 1.41,
#    no L2 norm non-finite or 20+.
# - rel_err 1.2e-2 for o: 2.1x FLA's worst (5.8e-3 at bench), 2.3x the solution's, 1,100x the floor; the mildest
#   shortcut (the three-term series at bench) is 12x over it, W = 2048 15x.
# - atol 5e-3 for o (at rtol 2e-2): 1.85x the worst need of a correct kernel (FLA's 2.7e-3 at odd; the
#   solution's 2.1e-3). An absolute bound set by the shape with the largest |o| (odd, rms 0.13): at bench (rms
#   0.0085) it is loose, and there rel_err is what catches errors. The shortcuts need 1.8e-2 (W = 2048) and
#   5.3e-2 or more (the series) at bench.
# - rel_err 1e-2 for the final state: 2.0x FLA's worst (5.0e-3 at bench), 700x the floor; the three-term series is
#   16x over it, W = 2048 24x.
# - atol 2e-2 for the final state (rtol 2e-2): 2.2x the worst need (the solution's 9.2e-3 at odd; it was 1e-2,
#   which these inputs would have left 1.09x above the solution). The state grows with long memory (rms 0.1-0.5,
#   max 3.4), and the need is not proportional to it (6.2e-3 at bench is 6% of the rms, 9.2e-3 at odd 2%: the
#   error grows with the chunks accumulated, not only with |S|), so the bound stays absolute; were the inputs to
#   make the state much larger, it would have to follow (kernels.spec.Tolerance has no scale-relative term). The
#   shortcuts need 0.29 (mid) to 1.0 (bench). Not rejected: a state carried in bf16 between chunks (state rel_err
#   6.2e-3 at bench, 6.4e-3 at mid, atol need 8.6e-3), as close to the reference as FLA; it saves no DRAM traffic
#   (the carried state lives in registers or shared memory), so no time to gain from it.
TOLERANCE = Tolerance(rel_err=1.2e-2, atol=5e-3, rtol=2e-2)
STATE_TOLERANCE = Tolerance(rel_err=1e-2, atol=2e-2, rtol=2e-2)


def flops(dims: Dims) -> float:
    """Matmul flops of the chunked algorithm (chunk C=64, 2 flops a multiply-add), dense blocks.

    Per chunk and head: Akk and Aqk (2 * 2 C^2 K), the unit-lower solve for [W | U] (C^2 (K + V)),
    V' = U - W S, O = Qg S and S += Kdᵀ V' (3 * 2 C K V), Aqk V' (2 C^2 V). Gate, norms and
    exponentials are left out. Per token and head: 4CK + C(K + V) + 2CV + 6KV.
    """
    B, T, H, K, V = (int(dims[n]) for n in ("B", "T", "H", "K", "V"))
    C = CHUNK
    per_token = 4 * C * K + C * (K + V) + 2 * C * V + 6 * K * V
    return float(B * T * H * per_token)


def bytes_moved(dims: Dims) -> float:
    """Compulsory DRAM traffic in the GPU dtype (bf16, 2 bytes): read q, k, g_raw, v, beta and the
    float32 parameters and initial state once; write o once and the float32 final state."""
    B, T, H, K, V = (int(dims[n]) for n in ("B", "T", "H", "K", "V"))
    elem = 2
    reads = B * T * H * (3 * K + V + 1) * elem + (H + H * K) * 4
    state = B * H * K * V * 4
    writes = B * T * H * V * elem + state
    return float(reads + writes + (state if dims.get("init", 0) else 0))


def _torch_chunked(*inputs: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    o, state = chunked_reference(*inputs)  # type: ignore[arg-type]
    q = inputs[0]
    assert q is not None
    return o.to(q.dtype), state


def _fla_available() -> str | None:
    if importlib.util.find_spec("fla") is None:
        return "FLA is not installed (pip install fla-core>=0.6)"
    if not torch.cuda.is_available():
        return "FLA's chunk_kda needs a CUDA GPU"
    return None


def _fla_chunk_kda(q, k, v, g_raw, beta, A_log, dt_bias, initial_state):
    """FLA's Triton chunk_kda with the gate, L2 norm and the -5 bound fused in (its fastest path)."""
    os.environ["FLA_FLASH_KDA"] = "0"  # keep FLA's own Triton kernels, not the CUTLASS FlashKDA
    from fla.ops.kda import chunk_kda

    with torch.no_grad():
        return chunk_kda(
            q, k, v, g_raw, beta,
            initial_state=initial_state,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True,
            safe_gate=True,
            lower_bound=-5.0,
            A_log=A_log,
            dt_bias=dt_bias,
        )


PROBLEM = Problem(
    name="kda",
    summary="Kimi Delta Attention forward: gated delta rule with per-channel decay, chunked (FLA layout)",
    description=DESCRIPTION,
    shapes=SHAPES,
    make_inputs=make_inputs,
    refill_inputs=refill_inputs,
    reference=reference,
    tolerance=TOLERANCE,
    output_tolerances={"final_state": STATE_TOLERANCE},
    output_dtypes={"final_state": "float32"},
    flops=flops,
    bytes=bytes_moved,
    output_names=("o", "final_state"),
    gpu_dtype=torch.bfloat16,
    cpu_dtype=torch.float32,
    check_shapes=("small", "odd"),
    baselines=(
        Baseline(
            name="fla_chunk_kda",
            fn=_fla_chunk_kda,
            description="FLA 0.6 chunk_kda (Triton), gate + L2 norm fused, safe_gate, lower_bound=-5",
            available=_fla_available,
            needs_gpu=True,
        ),
        Baseline(
            name="torch_chunked",
            fn=_torch_chunked,
            description="the chunked form in plain torch, float32 compute (reference.chunked_reference)",
        ),
    ),
)
