"""Chunked KDA forward in Triton and Gluon: a chunk-parallel prep, a solve, and a sequential state scan.

Three stages, each one kernel (DESIGN.md §9 has the algorithm; kernels/kda/reference.py has it in torch):

1. Prep, one program per (chunk of 64 tokens, batch * head), all independent: the gate, the L2 norms, the
   cumulative gate G, and on whole 64-row tiles the decayed scores Akk and Aqk, as four tensor-core products,
   one per sub-block centre. Writes Qg = Q e^G, Kd = K e^(G_last - G), Aqk and exp(G_last) for the scan, and
   Akk with beta k e^G (in W's buffer) for the solve.
   - `kda_chunk_prep_gluon_kernel` on a Hopper GPU with bf16 inputs (PREP_GLUON): its layout keeps each key
     column's 64 rows inside one warp, so the sums along time (the cumulative gate, G_last, the centres) are
     shuffles, and the score products read operands written once to shared memory.
   - `kda_chunk_prep_full_kernel` elsewhere (the CPU's interpreter, other GPUs, float32), after
     `kda_gate_cumsum_kernel` (GATE_APART), which forms G apart: in Triton's layout the sums along time cross
     warps through shared memory, and the Triton prep waited on them.
2. `kda_chunk_solve_kernel`, the UT transform (I + Akk) [W | U] = Diag(beta) [K e^G | V]: the 64x64 inverse as
   ten matmuls (nilpotent products for the 16x16 diagonal blocks, then one block-lower correction), then W and
   U. A kernel of its own because the inverse is a chain of dependent products: at 4 warps and few registers,
   several of its CTAs share an SM and overlap their chains, where inside the prep (all 255 registers, one
   8-warp CTA an SM) the chain ran alone.
3. The scan, one program per (block of value columns, batch * head): walks the chunks with its K x BV state
   slice in float32 registers: V' = U - W S, O = Qg S + Aqk V', S <- Diag(e^G_last) S + Kdᵀ V'. Four matmuls a
   chunk; every load is independent of S, so loads run chunks ahead.
   - `kda_chunk_scan_gluon_kernel` on a Hopper GPU (bf16, K 64 or 128; USE_GLUON_SCAN): TMA-fed stages, the two
     products of S issued together and only W S awaited before V', e^G_last loaded a chunk ahead, and one to
     four warpgroups a program sharing the key-side tiles (_gluon_scan_config picks the fewest value columns
     whose grid fits in one wave).
   - `kda_chunk_scan_kernel` elsewhere: the same products, Triton's pipeliner prefetching NUM_STAGES - 1 chunks.

Re-centring: exp(G_i - G_j) is split as exp(G_i - c) exp(c - G_j) with c the cumulative gate at the first
row of i's sub-block of 16, so no factor passes e^75 even with every gate at its -5 bound (a centre at
the chunk start needs e^315). Each centre's column factors k_j e^(c - G_j) are formed only up to the end
of its own sub-block (at most 1 before it, at most e^75 inside it), so no exponent is ever positive outside
a diagonal block, and no centre lies after the row it serves.

Measured figures (per kernel, per variant, and the variants tried and removed) are in BENCHMARKS.md, "The
project's kernels", not here: the comments below keep the constraints and the reasons.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# ---- The prep. PREP_GLUON: 1 takes kda_chunk_prep_gluon_kernel on a Hopper GPU with bf16 inputs (its products
# take them as they are; the interpreter cannot run Gluon, so the CPU takes kda_chunk_prep_full_kernel); 2 takes
# it always (to compile it without a GPU); 0 never.
PREP_GLUON = 1
NEUMANN_MIN_K = tl.constexpr(0)
# The Triton prep's warps. entry() refuses fewer than 8: at 4, Triton 3.6 miscompiled this kernel's U product
# when the solve was inside it (an out-of-range shared-memory access: wrong outputs or an illegal address on the
# H200, right in the interpreter); without the solve, 4 warps has not been checked on a GPU.
NUM_WARPS_PREP = 8
# The Triton prep's register cap. Uncapped it fits in 255 registers with a few bytes of spills; a cap of 128
# would spill over a kilobyte a thread.
MAXNREG_PREP_FULL: int | None = None
# The Triton prep's gate apart (1): kda_gate_cumsum_kernel (NUM_WARPS_GATE warps, GATE_BK columns a program, many
# CTAs an SM) writes G, the within-chunk cumulative gate, in float32 ([B, T, H, K], rows < T), and the prep reads
# G, G_last (the chunk's last valid row) and the centres (rows 0, 16, 32, 48) from memory: no sigmoid, no cumsum
# and none of the sums along time, which in Triton's layout cross warps through shared memory. The cost: G in
# float32 written and read back in g_raw's place, and one more launch. 0 forms the gate inside the prep. The
# Gluon prep forms the gate itself (its sums along time stay inside a warp): there it does not apply.
GATE_APART = 1
NUM_WARPS_GATE = 4
GATE_BK = 64  # columns of K a gate program (at most the padded K): [64, 64] float32, 32 values a thread at 4 warps

# ---- The solve. Akk travels from the prep in the input dtype (1, bf16 on the GPU) or in float32 (0). The "input"
# inverse rounds the operands it makes of Akk to the input dtype anyway (o and the final state come out bit for
# bit the same), so bf16 halves Akk's traffic and lowers the solve's registers at no cost; the other INV_PRECISION
# values keep float32 operands on purpose, and entry() refuses AKK_BF16 with them.
AKK_BF16 = 1
# Warps of the solve where K and V (padded to powers of two) are both at least 64. Below that (the small and odd
# check shapes) it runs at SOLVE_WARPS_SMALL_N: at 4 warps Triton 3.6 miscompiles its products with N = 16 or 32
# columns on sm_90 (wrong W and U on the H200, right in the interpreter, memcheck clean; `benchmarks/
# kda_check_small.py --set SOLVE_WARPS_SMALL_N=4`), the same fault as the Triton prep's at 4 warps.
NUM_WARPS_SOLVE = 4
SOLVE_WARPS_SMALL_N = 8
MAXNREG_SOLVE: int | None = None  # the solve's register cap: uncapped, 4 warps fit without spills
# Precision of the inverse's ten matmuls: "input" (operands rounded to the input dtype, bf16 on the GPU, float32
# accumulation), or float32 operands at "tf32" (one tensor-core pass), "tf32x3" (about float32 accuracy, three
# passes) or "ieee" (no tensor cores). The inverse is rounded to the input dtype for the W and U products anyway,
# so "input" loses nothing the tolerance sees (the same rel_err as "tf32" on the H200), at twice tf32's tensor
# rate and half its operand registers.
INV_PRECISION = "input"

# ---- The scan. USE_GLUON_SCAN: 1 takes kda_chunk_scan_gluon_kernel on a Hopper GPU with bf16 inputs
# (_takes_gluon_scan); 2 always (to compile it without a GPU); 0 never. The Gluon scan reorders what the Triton
# scan waited on: each product awaited before the next was issued, and e^G_last loaded inside the loop.
USE_GLUON_SCAN = 1
# Value columns a Gluon scan program (32, 64 or 128: one warpgroup per 32, sharing a stage's key-side tiles).
# None: the fewest whose grid fits in one wave on the GPU's SMs: a program's time grows less than its columns, so
# fewer, wider programs win once narrow ones would need more than one wave.
GLUON_SCAN_BV: int | None = None
# Chunks in shared memory. None: 3 at 32 columns (60 KB a stage), 2 above (64 KB a stage at 64 columns, where 2
# measured faster than 3; 72 KB at 128, where 3 do not fit sm_90's 227 KB).
GLUON_SCAN_STAGES: int | None = None
# The Triton scan (kda_chunk_scan_kernel) runs where the Gluon scan does not (_takes_gluon_scan: the CPU and GPUs
# other than Hopper, float32, K other than 64 or 128, V not a multiple of 32, more than one sequence with T not a
# multiple of 64).
BV = 32  # value columns per scan program: the state block is K x BV float32 registers
NUM_WARPS = 4  # scan kernel
# Scan kernel: chunks of W, U, Qg, Kd, Aqk in flight ahead of the one in use (60 KB a chunk at BV = 32): the scan
# waits on these loads. 4 needs more than sm_90's 227 KB of shared memory. At 1, Triton 3.6 compiles the scan with
# an out-of-bounds shared-memory read where K = 128 (on the H200, compute-sanitizer: an invalid 1024-byte
# __shared__ read in the Qg S + Aqk V' line; an illegal address without it; right at K = 32): entry() refuses one
# stage from K = 64 up (64 itself unchecked).
NUM_STAGES = 3

# What a tuner may change (client/search/space.py): each name is a module-level constant above, and the combinations
# ruled out before they are tried, each with why. Knobs of a kernel that does not run with the others' values (the
# Triton prep's and the gate kernel's where the Gluon prep runs on Hopper, the Triton scan's where the Gluon scan
# runs: every bench shape) are pinned to their defaults there, so no kernel is measured twice under two names. The
# shared-memory sums are sm_90 compiles at bench (K = V = 128, bf16): the Triton scan holds NUM_STAGES chunks of
# W, Qg, Kd (64 x K), U (64 x BV) and Aqk (64 x 64) and 256 B a value column; the Gluon scan its stages of the
# same, the output tile and 384 B a column.
TUNE_SPACE = {
    "PREP_GLUON": [0, 1],
    "NUM_WARPS_PREP": [8, 16],
    "MAXNREG_PREP_FULL": [None, 128, 168],
    "GATE_APART": [0, 1],
    "NUM_WARPS_GATE": [2, 4, 8],
    "GATE_BK": [16, 32, 64, 128],
    "AKK_BF16": [0, 1],
    "NUM_WARPS_SOLVE": [4, 8],
    "MAXNREG_SOLVE": [None, 128, 168],
    "INV_PRECISION": ["input", "tf32", "tf32x3", "ieee"],
    "USE_GLUON_SCAN": [0, 1],
    "GLUON_SCAN_BV": [None, 32, 64, 128],
    "GLUON_SCAN_STAGES": [None, 2, 3],
    "BV": [16, 32, 64, 128],
    "NUM_WARPS": [2, 4, 8],
    "NUM_STAGES": [2, 3],
}
TUNE_CONSTRAINTS = {
    "entry() refuses AKK_BF16 with an inverse that keeps float32 operands":
        "AKK_BF16 == 0 or INV_PRECISION == 'input'",
    "the Triton prep's warps, cap and gate split change nothing where the Gluon prep runs (Hopper, bf16)":
        "PREP_GLUON == 0 or (NUM_WARPS_PREP == 8 and MAXNREG_PREP_FULL is None and GATE_APART == 1)",
    "the gate kernel's knobs change nothing where it does not run":
        "(GATE_APART == 1 and PREP_GLUON == 0) or (NUM_WARPS_GATE == 4 and GATE_BK == 64)",
    "the Gluon scan's knobs change nothing with USE_GLUON_SCAN = 0":
        "USE_GLUON_SCAN == 1 or (GLUON_SCAN_BV is None and GLUON_SCAN_STAGES is None)",
    "the Triton scan's knobs change only the check shapes where the Gluon scan runs (Hopper, bf16: every bench shape)":
        "USE_GLUON_SCAN == 0 or (BV == 32 and NUM_WARPS == 4 and NUM_STAGES == 3)",
    "a block's registers fit the SM's 65,536 (16 prep warps under a 168-register cap cannot launch)":
        "MAXNREG_PREP_FULL is None or NUM_WARPS_PREP * 32 * MAXNREG_PREP_FULL <= 65536",
    "the Triton scan's NUM_STAGES chunks fit sm_90's 227 KB of shared memory a block":
        "NUM_STAGES * 128 * (448 + BV) + 256 * BV <= 232448",
    "the Gluon scan's stages fit sm_90's 227 KB of shared memory a block (128 value columns where chosen itself)":
        "GLUON_SCAN_STAGES is None or GLUON_SCAN_STAGES * (57352 + 128 * (GLUON_SCAN_BV or 128)) + "
        "512 * (GLUON_SCAN_BV or 128) <= 232448",
}
LOWER_BOUND = -5.0
L2NORM_EPS = 1e-6
CHUNK = 64  # tokens a chunk; the kernels hard-code 64 = 4 sub-blocks of 16 (the re-centring span)


# ---- 1. The prep in Triton, and the gate kernel before it (the CPU's path, and the GPU's where the Gluon prep does
# not run).


@triton.jit
def _gate(graw, a, bias, m, LOWER: tl.constexpr):
    """The KDA gate g = LOWER * sigmoid(a (g_raw + dt_bias)), 0 where m is false (padding rows and columns)."""
    return tl.where(m, LOWER * tl.sigmoid(a * (graw + bias[None, :])), 0.0)


@triton.jit
def kda_gate_cumsum_kernel(
    g_ptr, a_log_ptr, dt_bias_ptr, gcs_ptr,
    T, H,
    K: tl.constexpr, BK: tl.constexpr, LOWER: tl.constexpr,
):
    """GATE_APART = 1: the gate and its within-chunk cumulative sum G, float32, for one chunk, (batch, head) and
    block of BK columns; rows past T add g = 0 and are not stored (the prep kernel fills them with G_last)."""
    i_t = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_h = i_bh % H
    offs_t = tl.arange(0, 64)
    offs_k = tl.program_id(2) * BK + tl.arange(0, BK)
    mask_k = offs_k < K
    m = (i_t * 64 + offs_t < T)[:, None] & mask_k[None, :]
    row0 = ((i_bh // H).to(tl.int64) * T + i_t * 64) * H + i_h
    rk = (offs_t * H)[:, None] * K + offs_k[None, :]
    a = tl.exp(tl.load(a_log_ptr + i_h).to(tl.float32))
    bias = tl.load(dt_bias_ptr + i_h * K + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    graw = tl.load(g_ptr + row0 * K + rk, mask=m, other=0.0).to(tl.float32)
    tl.store(gcs_ptr + row0 * K + rk, tl.cumsum(_gate(graw, a, bias, m, LOWER), 0), mask=m)


@triton.jit
def _g_rows(g_c, rows, n_valid, g_last, offs_k, mask_k, H, K: tl.constexpr):
    """Rows `rows` of the chunk's G (from kda_gate_cumsum_kernel; a row index or a column of them), G_last
    where a row is at or past n_valid = T - t0: the value the cumsum with g = 0 gives there, finite, and on
    rows whose q, k and beta are 0."""
    valid = rows < n_valid
    x = tl.load(g_c + rows * H * K + offs_k, mask=valid & mask_k, other=0.0)
    return tl.where(valid, x, g_last)


@triton.jit
def _centre_scores(krf, qrf, k, G, c, offs_t, akk, aqk, lo: tl.constexpr, dt: tl.constexpr):
    """Add Akk and Aqk rows lo..lo+15 for the centre c = G at row lo. The row factors (in krf, qrf) are
    re-centred per row's own sub-block; the column factor k_j e^(c - G_j) is formed only for j < lo + 16
    (<= e^75 inside the sub-block, <= 1 before it), never for a later column."""
    keep = (offs_t < lo + 16)[:, None]
    kc = tl.where(keep, k * tl.exp(tl.where(keep, c[None, :] - G, 0.0)), 0.0).to(dt)
    rows = ((offs_t >= lo) & (offs_t < lo + 16))[:, None]
    akk = tl.dot(tl.where(rows, krf, 0.0).to(dt), tl.trans(kc), akk)
    aqk = tl.dot(tl.where(rows, qrf, 0.0).to(dt), tl.trans(kc), aqk)
    return akk, aqk


@triton.jit
def kda_chunk_prep_full_kernel(
    q_ptr, k_ptr, g_ptr, beta_ptr, a_log_ptr, dt_bias_ptr,
    w_ptr, qg_ptr, kd_ptr, aqk_ptr, decay_ptr, akk_ptr,
    T, H, NT, scale,
    K: tl.constexpr, BK: tl.constexpr, LOWER: tl.constexpr, EPS: tl.constexpr, GATE_APART: tl.constexpr,
):
    """The prep on whole 64-row tiles (tensor-core sized): Qg, Kd, Aqk and e^G_last for the scan; Akk and, in W's
    buffer, beta k e^G for kda_chunk_solve_kernel. With GATE_APART, g_ptr is G from kda_gate_cumsum_kernel
    (float32) instead of g_raw, and a_log_ptr, dt_bias_ptr are not read.

    Scores: four 64-row products, one per sub-block centre, each kept on its own 16 rows: 4x the multiply-adds
    of 16-row products, which would replicate their M = 16 operands in every warp.
    """
    i_t = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    dt = q_ptr.dtype.element_ty

    offs_t = tl.arange(0, 64)
    offs_k = tl.arange(0, BK)
    mask_t = i_t * 64 + offs_t < T
    mask_k = offs_k < K
    mk = mask_t[:, None] & mask_k[None, :]
    row0 = (i_b.to(tl.int64) * T + i_t * 64) * H + i_h  # the chunk's first token in [B * T * H]
    rk = (offs_t * H)[:, None] * K + offs_k[None, :]

    q = tl.load(q_ptr + row0 * K + rk, mask=mk, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + row0 * K + rk, mask=mk, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + row0 + offs_t * H, mask=mask_t, other=0.0).to(tl.float32)
    if GATE_APART:
        # G, G_last and the centres as rows of kda_gate_cumsum_kernel's G: loads in place of the sigmoid, the
        # cumsum and the sums along time below (across warps). Rows past T (not stored there) take G_last, as the
        # cumsum with g = 0 gives them below; the chunk's row 0 is always valid.
        g_c = g_ptr + row0 * K
        n_valid = T - i_t * 64
        g_last = tl.load(g_c + tl.minimum(n_valid - 1, 63) * H * K + offs_k, mask=mask_k, other=0.0)
        G = _g_rows(g_c, offs_t[:, None], n_valid, g_last[None, :], offs_k[None, :], mask_k[None, :], H, K)
        centre = _g_rows(g_c, (offs_t // 16 * 16)[:, None], n_valid, g_last[None, :], offs_k[None, :],
                         mask_k[None, :], H, K)  # each row's own centre, gathered
        c0 = tl.load(g_c + offs_k, mask=mask_k, other=0.0)
        c1 = _g_rows(g_c, 16, n_valid, g_last, offs_k, mask_k, H, K)
        c2 = _g_rows(g_c, 32, n_valid, g_last, offs_k, mask_k, H, K)
        c3 = _g_rows(g_c, 48, n_valid, g_last, offs_k, mask_k, H, K)
    else:
        a = tl.exp(tl.load(a_log_ptr + i_h).to(tl.float32))
        bias = tl.load(dt_bias_ptr + i_h * K + offs_k, mask=mask_k, other=0.0).to(tl.float32)
        graw = tl.load(g_ptr + row0 * K + rk, mask=mk, other=0.0).to(tl.float32)
        g = _gate(graw, a, bias, mk, LOWER)
        G = tl.cumsum(g, 0)  # padding rows add 0: the last row is G_last
        g_last = tl.sum(g, 0)

        # The centres c_I = G at rows 0, 16, 32, 48 in one reduction over a [4, 16, BK] view (the four rows picked
        # from each sub-block), in place of one cross-warp reduction a centre.
        C4 = tl.sum(tl.where(tl.arange(0, 16)[None, :, None] == 0, tl.reshape(G, (4, 16, BK)), 0.0), 1)
        centre = tl.reshape(tl.broadcast_to(C4[:, None, :], (4, 16, BK)), (64, BK))  # each row's own centre
        blk = tl.arange(0, 4)[:, None]
        c0 = tl.sum(tl.where(blk == 0, C4, 0.0), 0)
        c1 = tl.sum(tl.where(blk == 1, C4, 0.0), 0)
        c2 = tl.sum(tl.where(blk == 2, C4, 0.0), 0)
        c3 = tl.sum(tl.where(blk == 3, C4, 0.0), 0)
    q = q * (scale * tl.math.rsqrt(tl.sum(q * q, 1) + EPS))[:, None]
    k = k * tl.math.rsqrt(tl.sum(k * k, 1) + EPS)[:, None]
    # Everything that needs q or e^G is formed and stored here, so that only k and G stay live
    # through the scores (register pressure: each [64, 128] float32 tile is 32 registers a thread at 8 warps).
    rf = tl.exp(G - centre)  # <= 1
    e_g = rf * tl.exp(centre)  # e^G; underflows only below e^-87
    tl.store(qg_ptr + row0 * K + rk, (q * e_g).to(dt), mask=mk)
    qrf = (q * rf).to(dt)
    krf = (k * rf).to(dt)
    tl.store(kd_ptr + row0 * K + rk, (k * tl.exp(g_last[None, :] - G)).to(dt), mask=mk)
    akk = tl.zeros([64, 64], dtype=tl.float32)
    aqk = tl.zeros([64, 64], dtype=tl.float32)
    akk, aqk = _centre_scores(krf, qrf, k, G, c0, offs_t, akk, aqk, 0, dt)
    akk, aqk = _centre_scores(krf, qrf, k, G, c1, offs_t, akk, aqk, 16, dt)
    akk, aqk = _centre_scores(krf, qrf, k, G, c2, offs_t, akk, aqk, 32, dt)
    akk, aqk = _centre_scores(krf, qrf, k, G, c3, offs_t, akk, aqk, 48, dt)
    bkg = (beta[:, None] * k * tl.exp(G)).to(dt)  # the last use of k and G
    i_ = offs_t[:, None]
    j_ = offs_t[None, :]
    akk = tl.where(i_ > j_, akk * beta[:, None], 0.0)
    aqk = tl.where(i_ >= j_, aqk, 0.0)
    tl.store(aqk_ptr + row0 * 64 + (offs_t * H)[:, None] * 64 + offs_t[None, :], aqk.to(dt),
             mask=mask_t[:, None])
    decay_off = ((i_b.to(tl.int64) * NT + i_t) * H + i_h) * K
    tl.store(decay_ptr + decay_off + offs_k, tl.exp(g_last), mask=mask_k)

    # Left to kda_chunk_solve_kernel: Akk in float32 (the inverse's input; the input dtype with AKK_BF16),
    # beta k e^G in W's place.
    tl.store(akk_ptr + ((i_b.to(tl.int64) * NT + i_t) * H + i_h) * 4096 + i_ * 64 + j_,
             akk.to(akk_ptr.dtype.element_ty))
    tl.store(w_ptr + row0 * K + rk, bkg, mask=mk)


# ---- 1. The prep in Gluon (Hopper, bf16).


@gluon.jit
def _add(a, b):
    """The cumulative gate's combine (Gluon has no cumsum of its own: an associative scan with this)."""
    return a + b


@gluon.jit
def _centre_factor(c0, c1, c2, c3, blk, I: gl.constexpr):
    """e^(c_I - c_J) on the rows of sub-block J <= I (at most 1: the gate is negative), 0 on later rows: turns
    the column factors k e^(c_own - G) into centre I's k e^(c_I - G) with no exponential a value."""
    one = gl.full_like(c0, 1.0)
    if I == 0:
        f = gl.where(blk == 0, one[None, :], 0.0)
    elif I == 1:
        f = gl.where(blk == 0, gl.exp(c1 - c0)[None, :], gl.where(blk == 1, one[None, :], 0.0))
    elif I == 2:
        f = gl.where(blk == 0, gl.exp(c2 - c0)[None, :],
                     gl.where(blk == 1, gl.exp(c2 - c1)[None, :], gl.where(blk == 2, one[None, :], 0.0)))
    else:
        f = gl.where(blk == 0, gl.exp(c3 - c0)[None, :],
                     gl.where(blk == 1, gl.exp(c3 - c1)[None, :], gl.where(blk == 2, gl.exp(c3 - c2)[None, :],
                                                                             one[None, :])))
    return f


@gluon.jit
def kda_chunk_prep_gluon_kernel(
    q_ptr, k_ptr, g_ptr, beta_ptr, a_log_ptr, dt_bias_ptr,
    w_ptr, qg_ptr, kd_ptr, aqk_ptr, decay_ptr, akk_ptr,
    T, H, NT, scale,
    K: gl.constexpr, BK: gl.constexpr, LOWER: gl.constexpr, EPS: gl.constexpr,
):
    """kda_chunk_prep_full_kernel's outputs from the raw gate, its layouts chosen for its reductions.

    Each warp owns BK / 8 key columns and all 64 rows (16 lanes x 4 rows): the cumulative gate, G_last and
    the four centres reduce along time inside a warp (shuffles), not across warps through shared memory as
    in Triton's layout; only the two L2 norms cross warps. The score products read their operands from
    shared memory written once: [k; q] e^(G - c_own) as one 128-row A (the two warpgroups take Akk's and
    Aqk's rows), and the four centres' column factors as four B tiles; each product's rows outside its
    centre's sub-block are discarded."""
    L: gl.constexpr = gl.BlockedLayout([4, BK // 16], [16, 2], [1, 8], [1, 0])
    ROWS: gl.constexpr = gl.SliceLayout(1, L)
    COLS: gl.constexpr = gl.SliceLayout(0, L)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, 64, 16])
    OUT: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [8, 1], [1, 0])  # [128, 64]: 8 contiguous values a thread
    dt: gl.constexpr = q_ptr.dtype.element_ty
    A_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([128, BK], dt)
    B_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, BK], dt)

    i_t = gl.program_id(0)
    i_bh = gl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    offs_t = gl.arange(0, 64, layout=ROWS)
    offs_k = gl.arange(0, BK, layout=COLS)
    mask_t = i_t * 64 + offs_t < T
    mask_k = offs_k < K
    mk = mask_t[:, None] & mask_k[None, :]
    row0 = (i_b.to(gl.int64) * T + i_t * 64) * H + i_h  # the chunk's first token in [B * T * H]
    rk = (offs_t * H)[:, None] * K + offs_k[None, :]

    a = gl.exp(gl.load(a_log_ptr + i_h).to(gl.float32))
    bias = gl.load(dt_bias_ptr + i_h * K + offs_k, mask=mask_k, other=0.0).to(gl.float32)
    q = gl.load(q_ptr + row0 * K + rk, mask=mk, other=0.0).to(gl.float32)
    k = gl.load(k_ptr + row0 * K + rk, mask=mk, other=0.0).to(gl.float32)
    graw = gl.load(g_ptr + row0 * K + rk, mask=mk, other=0.0).to(gl.float32)
    beta = gl.load(beta_ptr + row0 + offs_t * H, mask=mask_t, other=0.0).to(gl.float32)
    q = q * (scale * gl.rsqrt(gl.sum(q * q, axis=1) + EPS))[:, None]
    k = k * gl.rsqrt(gl.sum(k * k, axis=1) + EPS)[:, None]
    # The gate's sigmoid with the fast division (div.full.f32, 2 ulp) in place of the IEEE-rounded one.
    g = gl.where(mk, gl.fdiv(LOWER, 1.0 + gl.exp(-a * (graw + bias[None, :]))), 0.0)
    G = gl.associative_scan(g, 0, _add)  # padding rows add 0: the last row is G_last
    g_last = gl.sum(g, axis=0)
    t2 = offs_t[:, None]
    c0 = gl.sum(gl.where(t2 == 0, G, 0.0), axis=0)
    c1 = gl.sum(gl.where(t2 == 16, G, 0.0), axis=0)
    c2 = gl.sum(gl.where(t2 == 32, G, 0.0), axis=0)
    c3 = gl.sum(gl.where(t2 == 48, G, 0.0), axis=0)
    blk = t2 // 16
    centre = gl.where(blk == 0, c0[None, :], gl.where(blk == 1, c1[None, :], gl.where(blk == 2, c2[None, :],
                                                                                       c3[None, :])))
    # In an order that ends each [64, BK] tile's life early (each is 32 registers a thread at BK = 128).
    rf = gl.exp(G - centre)  # <= 1
    e_g = rf * gl.exp(centre)  # e^G; underflows only below e^-87
    a_smem = gl.allocate_shared_memory(dt, [128, BK], A_SMEM)
    gl.store(qg_ptr + row0 * K + rk, (q * e_g).to(dt), mask=mk)
    a_smem.slice(64, 64).store((q * rf).to(dt))
    gl.store(w_ptr + row0 * K + rk, (beta[:, None] * k * e_g).to(dt), mask=mk)  # beta k e^G, for the solve
    a_smem.slice(0, 64).store((k * rf).to(dt))
    gl.store(kd_ptr + row0 * K + rk, (k * gl.exp(g_last[None, :] - G)).to(dt), mask=mk)
    decay_off = ((i_b.to(gl.int64) * NT + i_t) * H + i_h) * K
    gl.store(decay_ptr + decay_off + offs_k, gl.exp(g_last), mask=mask_k)
    b_smem = gl.allocate_shared_memory(dt, [4, 64, BK], B_SMEM)
    kc = k * gl.exp(centre - G)  # k e^(c_own - G): at most e^75 at the gate bound
    for I in gl.static_range(4):
        b_smem.index(I).store((kc * _centre_factor(c0, c1, c2, c3, blk, I)).to(dt))
    fence_async_shared()
    gl.thread_barrier()

    r_m = gl.arange(0, 128, layout=gl.SliceLayout(1, MMA))
    blk_m = ((r_m % 64) // 16)[:, None]
    zero = gl.zeros([128, 64], gl.float32, layout=MMA)
    acc = zero
    for I in gl.static_range(4):
        s = warpgroup_mma(a_smem, b_smem.index(I).permute((1, 0)), zero, use_acc=False)
        acc = gl.where(blk_m == I, s, acc)

    i_m = (r_m % 64)[:, None]
    j_m = gl.arange(0, 64, layout=gl.SliceLayout(0, MMA))[None, :]
    beta_m = gl.load(beta_ptr + row0 + (r_m % 64) * H, mask=i_t * 64 + r_m % 64 < T, other=0.0).to(gl.float32)
    akk = gl.where(i_m > j_m, acc * beta_m[:, None], 0.0)
    aqk = gl.where(i_m >= j_m, acc, 0.0)
    akk_c = akk_ptr + ((i_b.to(gl.int64) * NT + i_t) * H + i_h) * 4096
    if akk_ptr.dtype.element_ty == dt:
        # Both in one tile (rows 0-63 Akk, 64-127 Aqk) moved to a layout of 16-byte row pieces: the wgmma
        # layout holds two columns a thread, and its 4-byte stores held the prep up on the store queue.
        both = gl.convert_layout(gl.where(r_m[:, None] < 64, akk, aqk).to(dt), OUT)
        r_o = gl.arange(0, 128, layout=gl.SliceLayout(1, OUT))[:, None]
        j_o = gl.arange(0, 64, layout=gl.SliceLayout(0, OUT))[None, :]
        gl.store(akk_c + r_o * 64 + j_o, both, mask=(r_o < 64) & (j_o < 64))
        gl.store(aqk_ptr + row0 * 64 + ((r_o - 64) * H) * 64 + j_o, both,
                 mask=(r_o >= 64) & (i_t * 64 + r_o - 64 < T) & (j_o < 64))
    else:  # Akk in float32 (AKK_BF16 = 0): two stores from the wgmma layout
        # (& (j_m < 64), always true, broadcasts a row mask to the tile's shape.)
        is_k = (r_m < 64)[:, None] & (j_m < 64)
        ok_m = (i_t * 64 + r_m % 64 < T)[:, None] & (j_m < 64)
        gl.store(akk_c + i_m * 64 + j_m, akk.to(akk_ptr.dtype.element_ty), mask=is_k)
        gl.store(aqk_ptr + row0 * 64 + (i_m * H) * 64 + j_m, aqk.to(dt), mask=ok_m & ~is_k)


# ---- 2. The solve (after either prep).


@triton.jit
def _mm(a, b, INV_PRECISION: tl.constexpr, DT: tl.constexpr):
    """One product of the inverse's chain: float32 operands at INV_PRECISION, or ("input") operands rounded to DT,
    the input dtype (bf16 on the GPU: twice tf32's tensor rate and half its operand registers)."""
    if INV_PRECISION == "input":  # an else, not an early return: Triton compiles the code after a constexpr if
        c = tl.dot(a.to(DT), b.to(DT))
    else:
        c = tl.dot(a, b, input_precision=INV_PRECISION)
    return c


@triton.jit
def _inv_unit_lower_64(akk, i_, j_, INV_PRECISION: tl.constexpr, DT: tl.constexpr):
    """(I + Akk)^-1 for strictly lower Akk [64, 64] in ten matmuls: the 16x16 diagonal blocks D as
    (I - D)(I + D^2)(I + D^4)(I + D^8) (nilpotent), then I + Akk = (I + D)(I + N) with N = (I + D)^-1 L
    strictly block-lower, N^4 = 0, so (I + Akk)^-1 = (I - N)(I + N^2)(I + D)^-1."""
    eye = (i_ == j_).to(tl.float32)
    diag = tl.where(i_ // 16 == j_ // 16, akk, 0.0)
    d2 = _mm(diag, diag, INV_PRECISION, DT)
    d4 = _mm(d2, d2, INV_PRECISION, DT)
    d8 = _mm(d4, d4, INV_PRECISION, DT)
    d_inv = _mm(eye - diag, eye + d2, INV_PRECISION, DT)
    d_inv = _mm(d_inv, eye + d4, INV_PRECISION, DT)
    d_inv = _mm(d_inv, eye + d8, INV_PRECISION, DT)
    n = _mm(d_inv, akk - diag, INV_PRECISION, DT)
    n2 = _mm(n, n, INV_PRECISION, DT)
    return _mm(_mm(eye - n, eye + n2, INV_PRECISION, DT), d_inv, INV_PRECISION, DT)


@triton.jit
def _solve_w_u(t_inv, bkg, beta, v_c, w_c, u_c, rk, rv, mk, mv):
    """The UT transform's right-hand sides: W = (I + Akk)^-1 bkg, U = (I + Akk)^-1 Diag(beta) V, stored."""
    dt = w_c.dtype.element_ty
    w = tl.dot(t_inv, bkg)
    tl.store(w_c + rk, w.to(dt), mask=mk)
    v = tl.load(v_c + rv, mask=mv, other=0.0).to(tl.float32)
    u = tl.dot(t_inv, (beta[:, None] * v).to(dt))
    tl.store(u_c + rv, u.to(dt), mask=mv)


@triton.jit
def kda_chunk_solve_kernel(
    akk_ptr, beta_ptr, v_ptr, w_ptr, u_ptr,
    T, H, NT,
    K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, V_PAD: tl.constexpr, INV_PRECISION: tl.constexpr,
):
    """The UT transform after either prep: reads Akk and beta k e^G (from W's buffer), writes W over the latter,
    and U. Few registers, so several CTAs an SM overlap the inverse's chain."""
    i_t = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    offs_t = tl.arange(0, 64)
    offs_k = tl.arange(0, BK)
    offs_v = tl.arange(0, V_PAD)
    mask_t = i_t * 64 + offs_t < T
    mk = mask_t[:, None] & (offs_k < K)[None, :]
    mv = mask_t[:, None] & (offs_v < V)[None, :]
    row0 = (i_b.to(tl.int64) * T + i_t * 64) * H + i_h
    rk = (offs_t * H)[:, None] * K + offs_k[None, :]
    rv = (offs_t * H)[:, None] * V + offs_v[None, :]
    i_ = offs_t[:, None]
    j_ = offs_t[None, :]
    # Akk as the prep stored it: float32, or with AKK_BF16 the input dtype, kept so through the "input" inverse,
    # which rounds every operand to that dtype anyway (D and Akk - D hold Akk's values, I - D is promoted to
    # float32): the same products on fewer registers, so more CTAs an SM. The other precisions take float32
    # operands (entry() refuses AKK_BF16 with them, so this cast only meets float32 Akk: a guard, should that
    # refusal go).
    akk = tl.load(akk_ptr + ((i_b.to(tl.int64) * NT + i_t) * H + i_h) * 4096 + i_ * 64 + j_)
    if INV_PRECISION != "input":
        akk = akk.to(tl.float32)
    dt = w_ptr.dtype.element_ty
    if K >= NEUMANN_MIN_K:  # LAZY: (I + Akk)^-1 cut to its Neumann series of order 3
        eye = (i_ == j_).to(tl.float32)
        a = akk.to(tl.float32)
        t_inv = (_mm(eye - a, eye + _mm(a, a, INV_PRECISION, dt), INV_PRECISION, dt)).to(dt)
    else:
        t_inv = _inv_unit_lower_64(akk, i_, j_, INV_PRECISION, dt).to(dt)
    bkg = tl.load(w_ptr + row0 * K + rk, mask=mk, other=0.0)
    beta = tl.load(beta_ptr + row0 + offs_t * H, mask=mask_t, other=0.0).to(tl.float32)
    _solve_w_u(t_inv, bkg, beta, v_ptr + row0 * V, w_ptr + row0 * K, u_ptr + row0 * V, rk, rv, mk, mv)


# ---- 3. The scan: Triton (everywhere), Gluon (Hopper, bf16, K 64 or 128).


@triton.jit
def kda_chunk_scan_kernel(
    w_ptr, u_ptr, qg_ptr, kd_ptr, aqk_ptr, decay_ptr, h0_ptr,
    o_ptr, ht_ptr,
    T, H, NT,
    K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BLOCK_V: tl.constexpr,
    HAS_INITIAL_STATE: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    dt = w_ptr.dtype.element_ty

    offs_c = tl.arange(0, 64)
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V
    mask_s = mask_k[:, None] & mask_v[None, :]

    state_offs = i_bh.to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]
    if HAS_INITIAL_STATE:
        S = tl.load(h0_ptr + state_offs, mask=mask_s, other=0.0).to(tl.float32)
    else:
        S = tl.zeros([BK, BLOCK_V], dtype=tl.float32)

    base = i_b.to(tl.int64) * T * H + i_h
    decay_base = (i_b.to(tl.int64) * NT * H + i_h) * K
    for i_t in range(0, NT):
        t = i_t * 64 + offs_c
        mask_t = t < T
        rows = base + t.to(tl.int64) * H
        m_k = mask_t[:, None] & mask_k[None, :]
        m_v = mask_t[:, None] & mask_v[None, :]
        # Rows past T load as zeros: V' there is 0 and adds nothing to o or S.
        w = tl.load(w_ptr + rows[:, None] * K + offs_k[None, :], mask=m_k, other=0.0)
        qg = tl.load(qg_ptr + rows[:, None] * K + offs_k[None, :], mask=m_k, other=0.0)
        kd_t = tl.load(kd_ptr + rows[None, :] * K + offs_k[:, None], mask=mask_k[:, None] & mask_t[None, :], other=0.0)
        u = tl.load(u_ptr + rows[:, None] * V + offs_v[None, :], mask=m_v, other=0.0)
        aqk = tl.load(aqk_ptr + rows[:, None] * 64 + offs_c[None, :], mask=mask_t[:, None], other=0.0)
        decay_last = tl.load(decay_ptr + decay_base + i_t * H * K + offs_k, mask=mask_k, other=0.0)

        s_dt = S.to(dt)
        v_new = (u.to(tl.float32) - tl.dot(w, s_dt)).to(dt)
        o = tl.dot(qg, s_dt) + tl.dot(aqk, v_new)  # reads S from the chunk start, then the intra-chunk part
        S = S * decay_last[:, None] + tl.dot(kd_t, v_new)
        tl.store(o_ptr + rows[:, None] * V + offs_v[None, :], o.to(o_ptr.dtype.element_ty), mask=m_v)

    tl.store(ht_ptr + state_offs, S, mask=mask_s)


@gluon.jit
def _issue_chunk(w_desc, qg_desc, kd_desc, u_desc, aqk_desc, row, col_k, col_v, col_a, bar,
                 w_dst, qg_dst, kd_dst, u_dst, aqk_dst):
    """One chunk's scan operands into a stage's buffers; `bar` completes when all five land."""
    mbarrier.expect(bar, w_desc.block_type.nbytes + qg_desc.block_type.nbytes + kd_desc.block_type.nbytes
                    + u_desc.block_type.nbytes + aqk_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(w_desc, [row, col_k], bar, w_dst)
    tma.async_copy_global_to_shared(qg_desc, [row, col_k], bar, qg_dst)
    tma.async_copy_global_to_shared(kd_desc, [row, col_k], bar, kd_dst)
    tma.async_copy_global_to_shared(u_desc, [row, col_v], bar, u_dst)
    tma.async_copy_global_to_shared(aqk_desc, [row, col_a], bar, aqk_dst)


@gluon.jit
def kda_chunk_scan_gluon_kernel(
    w_desc, qg_desc, kd_desc, u_desc, aqk_desc, o_desc, decay_ptr, h0_ptr, ht_ptr,
    T, H, NT,
    V: gl.constexpr, STAGES: gl.constexpr, HAS_INITIAL_STATE: gl.constexpr,
):
    """kda_chunk_scan_kernel's program with its pipeline and product order explicit (USE_GLUON_SCAN).

    W, Qg, Kd [B * T, H * K], U [B * T, H * V] and Aqk [B * T, H * 64] are read by TMA in chunk tiles, STAGES
    chunks ahead; a stage's buffers are refilled as soon as the products that read them are done. In a chunk
    the products run in the order of the state's chain: W S and Qg S are issued together and only W S is
    awaited; V' = U - W S goes to shared memory; Kdᵀ V' (onto e^G_last S) and Aqk V' (onto Qg S) are issued
    together. e^G_last is loaded a chunk ahead into registers (Triton's scan loaded it in the loop and its
    state update waited on it). O leaves by TMA from shared memory. One warpgroup per 32 value columns
    (BLOCK_V = 32 x warps / 4): several warpgroups share the key-side tiles of a stage.
    Rows past T read as zeros (the last batch element, past the tensor's end) or are never read (T a multiple
    of 64 where B > 1: entry() sends other cases to the Triton scan)."""
    K: gl.constexpr = w_desc.block_type.shape[1]
    BLOCK_V: gl.constexpr = u_desc.block_type.shape[1]
    WG: gl.constexpr = BLOCK_V // 32
    dt: gl.constexpr = w_desc.dtype
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WG], instr_shape=[16, 32, 16])
    S_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([K, BLOCK_V], dt)
    V_SMEM: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, BLOCK_V], dt)

    i_v = gl.program_id(0)
    i_bh = gl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    row0 = i_b * T
    col_k = i_h * K
    col_v = i_h * V + i_v * BLOCK_V
    col_a = i_h * 64

    w_smem = gl.allocate_shared_memory(dt, [STAGES, 64, K], w_desc.layout)
    qg_smem = gl.allocate_shared_memory(dt, [STAGES, 64, K], qg_desc.layout)
    kd_smem = gl.allocate_shared_memory(dt, [STAGES, 64, K], kd_desc.layout)
    u_smem = gl.allocate_shared_memory(dt, [STAGES, 64, BLOCK_V], u_desc.layout)
    aqk_smem = gl.allocate_shared_memory(dt, [STAGES, 64, 64], aqk_desc.layout)
    s_smem = gl.allocate_shared_memory(dt, [K, BLOCK_V], S_SMEM)
    vn_smem = gl.allocate_shared_memory(dt, [64, BLOCK_V], V_SMEM)
    o_smem = gl.allocate_shared_memory(dt, [64, BLOCK_V], o_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for j in gl.static_range(STAGES):
        mbarrier.init(ready.index(j), count=1)
    fence_async_shared()
    for j in gl.static_range(STAGES):
        if j < NT:
            _issue_chunk(w_desc, qg_desc, kd_desc, u_desc, aqk_desc, row0 + j * 64, col_k, col_v, col_a,
                         ready.index(j), w_smem.index(j), qg_smem.index(j), kd_smem.index(j), u_smem.index(j),
                         aqk_smem.index(j))

    offs_k = gl.arange(0, K, layout=gl.SliceLayout(1, MMA))
    offs_v = i_v * BLOCK_V + gl.arange(0, BLOCK_V, layout=gl.SliceLayout(0, MMA))
    state_offs = i_bh.to(gl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]
    if HAS_INITIAL_STATE:
        S = gl.load(h0_ptr + state_offs).to(gl.float32)
    else:
        S = gl.zeros([K, BLOCK_V], gl.float32, layout=MMA)
    zero = gl.zeros([64, BLOCK_V], gl.float32, layout=MMA)
    decay_row = decay_ptr + (i_b.to(gl.int64) * NT * H + i_h) * K + offs_k
    decay_next = gl.load(decay_row)
    for i in range(NT):
        buf = i % STAGES
        decay = decay_next
        decay_next = gl.load(decay_row + gl.minimum(i + 1, NT - 1) * H * K)  # a chunk ahead
        s_smem.store(S.to(dt))
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.wait(ready.index(buf), (i // STAGES) & 1)
        u = u_smem.index(buf).load(MMA).to(gl.float32)  # before the products: its wait overlaps them
        v = warpgroup_mma(w_smem.index(buf), s_smem, zero, use_acc=False, is_async=True)
        o = warpgroup_mma(qg_smem.index(buf), s_smem, zero, use_acc=False, is_async=True)
        v = warpgroup_mma_wait(1, deps=[v])
        v_new = (u - v).to(dt)
        vn_smem.store(v_new)
        fence_async_shared()
        gl.thread_barrier()
        S = warpgroup_mma(kd_smem.index(buf).permute((1, 0)), vn_smem, S * decay[:, None], is_async=True)
        o = warpgroup_mma(aqk_smem.index(buf), vn_smem, o, is_async=True)
        S, o = warpgroup_mma_wait(0, deps=[S, o])
        if i + STAGES < NT:  # the products that read this stage are done, in every warpgroup after the barrier
            gl.thread_barrier()
            _issue_chunk(w_desc, qg_desc, kd_desc, u_desc, aqk_desc, row0 + (i + STAGES) * 64, col_k, col_v,
                         col_a, ready.index(buf), w_smem.index(buf), qg_smem.index(buf), kd_smem.index(buf),
                         u_smem.index(buf), aqk_smem.index(buf))
        tma.store_wait(0)  # the previous chunk's O has left o_smem
        o_smem.store(o.to(dt))
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(o_desc, [row0 + i * 64, col_v], o_smem)
    tma.store_wait(0)
    for j in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(j))
    gl.store(ht_ptr + state_offs, S)


# ---- The host side: which kernels run, and entry().


@functools.cache
def _device_facts(device_index: int) -> tuple[int, int]:
    """(compute capability major, SM count) of a GPU."""
    props = torch.cuda.get_device_properties(device_index)
    return props.major, props.multi_processor_count


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _on_hopper(device: torch.device) -> bool:
    """The Gluon kernels are written for Hopper's wgmma and TMA: elsewhere the Triton kernels run."""
    return device.type == "cuda" and _device_facts(_index(device))[0] == 9


def _takes_gluon_prep(q: torch.Tensor) -> bool:
    """Whether the prep runs as kda_chunk_prep_gluon_kernel (PREP_GLUON above): bf16 inputs (its products take
    them as they are), and a Hopper GPU unless forced."""
    if not PREP_GLUON or q.dtype != torch.bfloat16:
        return False
    return _on_hopper(q.device) or PREP_GLUON == 2


def _takes_gluon_scan(q: torch.Tensor, V: int) -> bool:
    """Whether the scan runs as kda_chunk_scan_gluon_kernel (USE_GLUON_SCAN above): a Hopper GPU unless forced,
    bf16, K 64 or 128 (the state update's wgmma takes K as its M, a multiple of 64; a TMA box of 64 rows by K),
    V a multiple of the value block (32 where chosen automatically), and T a multiple of 64 unless B = 1 (a
    chunk's tile must not run into the next sequence's rows, which its loads would add to the state and its
    store overwrite; past the tensor's end TMA reads zeros and drops stores)."""
    B, T, _, K = q.shape
    if not USE_GLUON_SCAN or q.dtype != torch.bfloat16 or K not in (64, 128) or V % (GLUON_SCAN_BV or 32):
        return False
    if T == 0 or (B > 1 and T % CHUNK):
        return False
    return _on_hopper(q.device) or USE_GLUON_SCAN == 2


def _gluon_scan_config(q: torch.Tensor, V: int) -> tuple[int, int]:
    """(value columns a program, stages) of the Gluon scan: GLUON_SCAN_BV and GLUON_SCAN_STAGES, or where None
    the fewest columns (32, 64, 128, dividing V) whose B * H * V / columns programs fit in one wave (else the
    most), and 3 stages at 32 columns, 2 above."""
    B, _, H, _ = q.shape
    block_v = GLUON_SCAN_BV
    if block_v is None:
        sms = _device_facts(_index(q.device))[1] if q.device.type == "cuda" else 132
        fits = [bv for bv in (32, 64, 128) if V % bv == 0]
        block_v = next((bv for bv in fits if B * H * (V // bv) <= sms), fits[-1])
    stages = GLUON_SCAN_STAGES or (3 if block_v == 32 else 2)
    return block_v, stages


def _scan_descriptors(w: torch.Tensor, qg: torch.Tensor, kd: torch.Tensor, u: torch.Tensor, aqk: torch.Tensor,
                      o: torch.Tensor, block_v: int) -> tuple[TensorDescriptor, ...]:
    """TMA descriptors of the scan's operands as [B * T, H * width] matrices, in boxes of one chunk's rows by K,
    block_v or 64 columns."""
    dtype = gl.bfloat16

    def described(t: torch.Tensor, cols: int) -> TensorDescriptor:
        layout = gl.NVMMASharedLayout.get_default_for([CHUNK, cols], dtype)
        return TensorDescriptor.from_tensor(t.view(t.shape[0] * t.shape[1], -1), [CHUNK, cols], layout)

    K = w.shape[-1]
    return (described(w, K), described(qg, K), described(kd, K), described(u, block_v), described(aqk, CHUNK),
            described(o, block_v))


def entry(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g_raw: torch.Tensor,
    beta: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    initial_state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KDA forward. Returns (o [B, T, H, V] in q's dtype, final_state [B, H, K, V] float32)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    for name, x in (("q", q), ("k", k), ("v", v), ("g_raw", g_raw), ("beta", beta)):
        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    if initial_state is not None and not initial_state.is_contiguous():
        raise ValueError("initial_state must be contiguous")
    if q.dtype == torch.float16:
        raise ValueError("float16 cannot hold the re-centred column factors k e^(c - G) the score products take in the "
                         "input dtype (up to e^75 with the gate at its bound; float16 ends near e^11): use bf16 or "
                         "float32")
    dev, dtype = q.device, q.dtype
    NT = triton.cdiv(T, CHUNK)
    bk = max(16, triton.next_power_of_2(K))  # tl.dot needs every dimension >= 16
    v_pad = max(16, triton.next_power_of_2(V))
    if NUM_STAGES < 2 and bk >= 64:
        raise ValueError(f"the scan kernel needs NUM_STAGES >= 2 where K >= 64, not {NUM_STAGES}: at one stage "
                         f"Triton 3.6 compiles it with an out-of-bounds shared-memory read at K = 128 (an illegal "
                         f"address on the H200)")

    # Intermediates in the input dtype, layout [B, T, H, *] like the inputs; decay_last = e^G_last in float32.
    w = torch.empty((B, T, H, K), dtype=dtype, device=dev)
    qg = torch.empty((B, T, H, K), dtype=dtype, device=dev)
    kd = torch.empty((B, T, H, K), dtype=dtype, device=dev)
    u = torch.empty((B, T, H, V), dtype=dtype, device=dev)
    aqk = torch.empty((B, T, H, CHUNK), dtype=dtype, device=dev)
    decay_last = torch.empty((B, NT, H, K), dtype=torch.float32, device=dev)
    sizes = (T, H, NT, K**-0.5)
    if NUM_WARPS_PREP < 8:
        raise ValueError(f"the Triton prep kernel needs NUM_WARPS_PREP >= 8, not {NUM_WARPS_PREP}: at 4 warps, with "
                         f"the solve inside it, Triton 3.6 compiled its U product with an out-of-range shared-memory "
                         f"access (wrong outputs or an illegal address on the H200); without the solve 4 warps has "
                         f"not been checked on a GPU")
    if AKK_BF16 and INV_PRECISION != "input":
        raise ValueError(f"AKK_BF16 = 1 needs INV_PRECISION = 'input' (the only inverse that rounds Akk to the "
                         f"input dtype anyway); INV_PRECISION = {INV_PRECISION!r} keeps float32 operands: "
                         f"set AKK_BF16 = 0")
    # Akk between the prep and the solve: [B, NT, H, 64, 64], float32 (16 KB a chunk and head) or with AKK_BF16 the
    # input dtype; one contiguous tile a chunk and head.
    akk_dtype = dtype if AKK_BF16 else torch.float32
    akk = torch.empty((B, NT, H, CHUNK, CHUNK), dtype=akk_dtype, device=dev)
    if _takes_gluon_prep(q):
        kda_chunk_prep_gluon_kernel[(NT, B * H)](
            q, k, g_raw, beta, A_log, dt_bias, w, qg, kd, aqk, decay_last, akk, *sizes, K=K, BK=bk,
            LOWER=LOWER_BOUND, EPS=L2NORM_EPS, num_warps=8,
        )
    else:
        g_in = g_raw
        if GATE_APART:
            # G, the within-chunk cumulative gate, float32 [B, T, H, K]: the prep kernel reads it in g_raw's place.
            g_in = torch.empty((B, T, H, K), dtype=torch.float32, device=dev)
            bk_gate = min(GATE_BK, bk)
            kda_gate_cumsum_kernel[(NT, B * H, triton.cdiv(K, bk_gate))](
                g_raw, A_log, dt_bias, g_in, T, H, K=K, BK=bk_gate, LOWER=LOWER_BOUND, num_warps=NUM_WARPS_GATE,
            )
        kda_chunk_prep_full_kernel[(NT, B * H)](
            q, k, g_in, beta, A_log, dt_bias, w, qg, kd, aqk, decay_last, akk, *sizes, K=K, BK=bk,
            LOWER=LOWER_BOUND, EPS=L2NORM_EPS, GATE_APART=bool(GATE_APART), num_warps=NUM_WARPS_PREP,
            maxnreg=MAXNREG_PREP_FULL,
        )
    kda_chunk_solve_kernel[(NT, B * H)](
        akk, beta, v, w, u, T, H, NT, K=K, V=V, BK=bk, V_PAD=v_pad, INV_PRECISION=INV_PRECISION,
        num_warps=NUM_WARPS_SOLVE if min(bk, v_pad) >= 64 else SOLVE_WARPS_SMALL_N, maxnreg=MAXNREG_SOLVE,
    )

    o = torch.empty((B, T, H, V), dtype=dtype, device=dev)
    final_state = torch.empty((B, H, K, V), dtype=torch.float32, device=dev)
    has_h0 = initial_state is not None
    h0 = initial_state if has_h0 else final_state  # not read without an initial state
    if _takes_gluon_scan(q, V):
        block_v, stages = _gluon_scan_config(q, V)
        kda_chunk_scan_gluon_kernel[(V // block_v, B * H)](
            *_scan_descriptors(w, qg, kd, u, aqk, o, block_v), decay_last, h0, final_state, T, H, NT,
            V=V, STAGES=stages, HAS_INITIAL_STATE=has_h0, num_warps=4 * (block_v // 32),
        )
    else:
        block_v = max(16, min(BV, triton.next_power_of_2(V)))
        kda_chunk_scan_kernel[(triton.cdiv(V, block_v), B * H)](
            w, u, qg, kd, aqk, decay_last, h0, o, final_state, T, H, NT,
            K=K, V=V, BK=bk, BLOCK_V=block_v, HAS_INITIAL_STATE=has_h0, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
    return o, final_state
