"""Chunked KDA forward in Triton: chunk-parallel prep (one or two kernels) and a sequential state scan.

1. `kda_chunk_prep_kernel`, one program per (chunk of 64 tokens, batch * head), all independent. In four
   sub-blocks of 16 rows: gate, L2 norms, the cumulative gate G, the decayed scores Akk / Aqk, and the
   UT transform (I + Akk) [W | U] = Diag(beta) [K e^G | V] by block forward substitution (each 16x16
   diagonal block inverted as a product of six small float32 matmuls, INV_PRODUCT). Writes W, U,
   Qg = Q e^G, Kd = K e^(G_last - G), Aqk in the input dtype and exp(G_last) in float32.
   `kda_chunk_prep_full_kernel` (PREP_FULL = 1, the default) computes the same on whole 64-row tiles: the
   scores as four tensor-core-sized products, one per sub-block centre, and the 64x64 inverse as ten matmuls
   (nilpotent products for the diagonal blocks, then one block-lower correction); 7% faster on the H200.
   With SOLVE_APART = 1 (the default) the inverse and the W, U products run in `kda_chunk_solve_kernel`,
   which reads Akk (float32) and beta k e^G back from memory: a 4-warp CTA with under half the prep
   kernel's registers, so two of its CTAs share an SM where the prep kernel runs one. With AKK_BF16 = 1
   Akk travels in the input dtype instead (the "input" inverse rounds it to that dtype anyway).
   With GATE_APART = 1 (full-tile prep only) `kda_gate_cumsum_kernel`, a light kernel before it, computes
   the gate and its within-chunk cumulative sum G (float32); the prep kernel then reads G, its centres and
   G_last as rows from memory instead of taking the sigmoid, the cumsum and six sums along time.
   On a GPU (bf16 inputs, SOLVE_APART = 1) the full-tile prep runs as `kda_chunk_prep_gluon_kernel`
   (PREP_GLUON), the same outputs from a kernel written in Gluon: its layout keeps each key column's 64 rows
   inside one warp, so the sums along time are shuffles, and the score products read operands written once
   to shared memory.
2. `kda_chunk_scan_kernel`, one program per (block of BV value columns, batch * head): walks the chunks
   with its K x BV state slice in float32 registers: V' = U - W S, O = Qg S + Aqk V',
   S <- Diag(e^G_last) S + Kdᵀ V'. Four wgmma matmuls a chunk; the loads do not depend on S, so the
   pipeliner prefetches them (NUM_STAGES - 1 chunks ahead). On a Hopper GPU (bf16, K 64 or 128) the scan runs as
   `kda_chunk_scan_gluon_kernel` (USE_GLUON_SCAN): TMA-fed stages, the two products of S issued together and
   only W S awaited before V', e^G_last loaded a chunk ahead, and one to four warpgroups a program sharing the
   key-side tiles: the fewest value columns a program whose grid fits in one wave (_gluon_scan_config).

Re-centring: exp(G_i - G_j) is split as exp(G_i - c) exp(c - G_j) with c the cumulative gate at the first
row of i's sub-block of 16, so no factor passes e^75 even with every gate at its -5 bound (a centre at
the chunk start needs e^315). The column factors k_j e^(c - G_j) of earlier sub-blocks are carried from
one centre to the next (times e^(c_I - c_{I-1}) <= 1) and end as Kd; no exponent is ever positive
outside a diagonal block, and no centre lies after the row it serves.

The split puts everything that parallelises over chunks before the scan (nearly all exponentials, the
solve, reading q, k, v, g once); the scan is the only sequential part. Measured on the H200 (BENCHMARKS.md,
bench, per kernel): Gluon prep 338 us, solve 101 us, Gluon scan 128 us (the Triton scan 216 us, 291 us with two
stages; the Triton full-tile prep 668 us, 390 us with its gate apart; in one kernel the prep and solve 947 us).
The Triton prep kernel, at one 8-warp CTA an SM (255 registers), was latency-bound on its cross-warp
reductions along time (`marathon hotspots`: 24% of its stall samples, shared-memory queue), which is what
the Gluon layout and the gate apart each remove. The Triton scan waited on its products' barriers (each
awaited before the next was issued) and on e^G_last, loaded in the loop: what the Gluon scan reorders.
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

# The Triton scan (kda_chunk_scan_kernel), which runs where the Gluon scan does not (_takes_gluon_scan: the CPU and
# GPUs other than Hopper, float32, K other than 64 or 128, V not a multiple of 32, more than one sequence with T not
# a multiple of 64).
BV = 32  # value columns per scan program: the state block is K x BV float32 registers
NUM_WARPS = 4  # scan kernel
# Scan kernel: chunks of W, U, Qg, Kd, Aqk in flight ahead of the one in use (60 KB a chunk at BV = 32). The scan
# waits on these loads (its hotspots: the W load), and 3 measured 291 -> 216 us at bench on the H200 against 2
# (BENCHMARKS.md); 4 needs more than sm_90's 227 KB of shared memory.
NUM_STAGES = 3
# At NUM_STAGES = 1 Triton 3.6 compiles the scan with an out-of-bounds shared-memory read where K = 128 (on the H200,
# compute-sanitizer: an invalid 1024-byte __shared__ read in the Qg S + Aqk V' line; an illegal address without it;
# right at K = 32): entry() refuses one stage from K = 64 up (64 itself unchecked).
NUM_WARPS_PREP = 8  # prep kernel: 4 warps needs more registers a thread (the M = 16 operands replicate per warp)
# Register cap for the sub-block prep kernel. Uncapped, ptxas takes 227-233 registers without spills (one
# CTA of 8 warps an SM); 128 gives two CTAs an SM at a few hundred bytes of spills a thread, and measured
# faster on the H200 (bench, product inverses, 8 warps: 1321 us in all capped against 1548 us uncapped).
MAXNREG_PREP: int | None = 128
# The full-tile prep kernel's cap: uncapped it takes 255 registers and spills 16 bytes (with the solve apart;
# 88 with it inside); at 128 it would spill over a kilobyte a thread.
MAXNREG_PREP_FULL: int | None = None
# Prep kernel: 1 on whole 64-row tiles with the 64x64 inverse as ten matmuls (kda_chunk_prep_full_kernel),
# 0 in 16-row sub-blocks. Measured at bench on the H200 (BENCHMARKS.md): 949 (935 since) against 1016 us for
# the prep kernel alone, 1250 against 1318 us in all. With its solve inside (SOLVE_APART = 0) the full-tile
# kernel needs 8 warps: at 4, Triton 3.6's code for the U product (t_inv @ beta v) reads shared memory out of
# range (compute-sanitizer memcheck at the odd shape; wrong outputs or an illegal address on the H200, right in
# the interpreter), so entry() refuses.
PREP_FULL = 1
# The full-tile prep's solve (the 64x64 inverse, W and U) in a kernel of its own (1) or inside the prep
# kernel (0). Apart, the prep kernel stores Akk (float32, 16 KB a chunk) and beta k e^G (in W's buffer) and
# kda_chunk_solve_kernel (246 registers at 4 warps with a tf32 inverse: two CTAs an SM) overlaps the inverse's
# chain of dependent products, which inside the prep kernel runs at one 8-warp CTA an SM. Measured at bench on
# the H200: prep and solve 947 -> 670 + 198 us (tf32 inverse); the solve at 8 warps (one CTA an SM) 350 us,
# capped at 168 registers 195 us.
SOLVE_APART = 1
# The full-tile prep (with its solve apart) written in Gluon, kda_chunk_prep_gluon_kernel: the same outputs, with a
# layout that keeps each key column's 64 rows inside one warp (the cumulative gate, G_last and the centres reduce
# by shuffles, not across warps through shared memory) and the score products' operands written once to shared
# memory. Measured at bench on the H200: prep 668.5 -> 339.5 us (BENCHMARKS.md). 0: never; 1: on a GPU with bf16
# inputs (the interpreter cannot run Gluon: the CPU takes kda_chunk_prep_full_kernel); 2: always (to compile it
# without a GPU). GATE_APART does not apply to it (it forms the gate itself).
PREP_GLUON = 1
# The Triton full-tile prep's gate apart (1): kda_gate_cumsum_kernel (NUM_WARPS_GATE warps, GATE_BK columns a
# program, many CTAs an SM) writes G, the within-chunk cumulative gate, in float32 ([B, T, H, K], rows < T), and the
# prep kernel reads G, G_last (the chunk's last valid row) and the centres (rows 0, 16, 32, 48) from memory: no
# sigmoid, no cumsum and none of the six sums along time (G_last, C4, c0..c3), which in Triton's layout cross warps
# through shared memory. The cost: 256 MiB more DRAM traffic at bench (G in float32 written by the gate kernel and
# read by the prep in place of g_raw) and one more launch. Measured at bench on the H200 (PREP_GLUON = 0): prep
# 668 -> 390 us, the gate kernel 55 us. The Gluon prep forms the gate itself (its time-axis sums stay inside a
# warp): there it does not apply.
# Ignored with PREP_FULL = 0, as SOLVE_APART is (the sub-block prep has no such reductions).
GATE_APART = 1
NUM_WARPS_GATE = 4
GATE_BK = 64  # columns of K a gate program (at most the padded K): [64, 64] float32, 32 values a thread at 4 warps
# Akk between the prep and the solve kernel (SOLVE_APART = 1) in the input dtype (1, bf16 on the GPU) instead of
# float32 (0). With INV_PRECISION = "input" the inverse rounds the operands it makes of Akk to the input dtype anyway
# (o and the final state came out bit for bit the same on the H200 at small, odd and mid), and Akk in bf16 saves
# 32 MiB written and 32 MiB read at bench: the solve kernel 126.4 -> 101.4 us (153 registers against 186), the prep
# +6 us. entry() refuses it with any other INV_PRECISION (those keep float32 operands on purpose); ignored where
# Akk is not stored (PREP_FULL = 0 or SOLVE_APART = 0).
AKK_BF16 = 1
# Warps of the solve kernel where K and V (padded to powers of two) are both at least 64. Below that (the small
# and odd check shapes) it runs at 8: at 4 warps Triton 3.6 miscompiles its products with N = 16 or 32 columns
# on sm_90 (wrong W and U on the H200, right in the interpreter, memcheck clean; `benchmarks/kda_check_small.py
# --set SOLVE_WARPS_SMALL_N=4`), the fault behind the full-tile prep's 4-warp refusal in entry().
NUM_WARPS_SOLVE = 4
SOLVE_WARPS_SMALL_N = 8
MAXNREG_SOLVE: int | None = None  # solve kernel's register cap (uncapped at 4 warps: 153 with AKK_BF16, 186 without)
# Precision of the full-tile inverse's ten matmuls: "input" (operands rounded to the input dtype, bf16 on the GPU,
# float32 accumulation), or float32 operands at "tf32" (one tensor-core pass), "tf32x3" (about float32 accuracy,
# three passes: 2136 against 1250 us in all at bench) or "ieee" (no tensor cores). The inverse is rounded to the
# input dtype for the W and U products anyway: on the H200 "input" gives the same rel_err as "tf32" (o 3.6-4.1e-3
# at small, odd, mid and bench over two seeds) and the solve kernel 198 -> 126 us at bench (186 registers).
INV_PRECISION = "input"
# 16x16 inverses as a product of six float32 matmuls (1) or by row-by-row substitution (0).
INV_PRODUCT = 1
# Scores Akk / Aqk from float32 (tf32 on the GPU) instead of input-dtype operands: a precision knob.
SCORES_FP32 = False
# The scan written in Gluon (kda_chunk_scan_gluon_kernel): the same products with TMA-fed stages, W S and Qg S
# issued together, Kdᵀ V' and Aqk V' issued together, and e^G_last loaded a chunk ahead (the Triton scan's state
# update waited on that load: its hotspots, long_sb on the update line). 0: never; 1: on a Hopper GPU with bf16
# inputs (_takes_gluon_scan); 2: always (to compile it without a GPU).
USE_GLUON_SCAN = 1
# Value columns a Gluon scan program (32, 64 or 128: one warpgroup per 32, sharing the key-side tiles of a stage).
# None: the fewest whose grid fits in one wave on the GPU's SMs, as measured at bench and bench_h96 on the H200
# (BENCHMARKS.md): 128 programs of 32 columns at bench 134.6 us (64 columns 203.8, 128 columns 380.9), and at
# bench_h96 96 programs of 128 columns 361.6 us (384 of 32 in three waves 395.2, 192 of 64 in two 410.2).
GLUON_SCAN_BV: int | None = None
# Chunks in shared memory: None: 3 at 32 columns (60 KB a stage; 2 measured 150.2 against 134.6 us at bench),
# 2 above (64 KB a stage at 64 columns, where 2 measured faster than 3; 72 KB at 128, where 3 do not fit).
GLUON_SCAN_STAGES: int | None = None
# What a tuner may change (client/search/space.py): each name is a module-level constant above, and the combinations
# ruled out before they are tried, each with why. Knobs of a kernel that does not run with the others' values (the
# sub-block prep's with PREP_FULL = 1, the solve kernel's with its solve inside, the Triton prep's and gate kernel's
# where the Gluon prep runs on Hopper, the Triton scan's where the Gluon scan runs: every bench shape) are pinned to
# their defaults there, so no kernel is measured twice under two names. The shared-memory sums are sm_90 compiles at
# bench (K = V = 128, bf16): the Triton scan holds NUM_STAGES chunks of W, Qg, Kd (64 x K), U (64 x BV) and Aqk
# (64 x 64) and 256 B a value column; the Gluon scan its stages of the same, the output tile and 384 B a column.
TUNE_SPACE = {
    "PREP_FULL": [0, 1],
    "SOLVE_APART": [0, 1],
    "PREP_GLUON": [0, 1],
    "GATE_APART": [0, 1],
    "INV_PRECISION": ["input", "tf32", "tf32x3", "ieee"],
    "AKK_BF16": [0, 1],
    "NUM_WARPS_PREP": [4, 8],
    "MAXNREG_PREP": [None, 128, 168],
    "MAXNREG_PREP_FULL": [None, 128, 168],
    "INV_PRODUCT": [0, 1],
    "SCORES_FP32": [False, True],
    "NUM_WARPS_GATE": [2, 4, 8],
    "GATE_BK": [16, 32, 64, 128],
    "NUM_WARPS_SOLVE": [4, 8],
    "MAXNREG_SOLVE": [None, 128, 168],
    "USE_GLUON_SCAN": [0, 1],
    "GLUON_SCAN_BV": [None, 32, 64, 128],
    "GLUON_SCAN_STAGES": [None, 2, 3],
    "BV": [16, 32, 64, 128],
    "NUM_WARPS": [2, 4, 8],
    "NUM_STAGES": [2, 3],
}
TUNE_CONSTRAINTS = {
    "entry() refuses the full-tile prep below 8 warps (Triton 3.6 miscompiles its U product at 4)":
        "PREP_FULL == 0 or NUM_WARPS_PREP >= 8",
    "entry() refuses AKK_BF16 with an inverse that keeps float32 operands":
        "not (PREP_FULL == 1 and SOLVE_APART == 1 and AKK_BF16 == 1) or INV_PRECISION == 'input'",
    "the sub-block prep's knobs change nothing with the full-tile prep":
        "PREP_FULL == 0 or (MAXNREG_PREP == 128 and INV_PRODUCT == 1 and SCORES_FP32 == False)",
    "the full-tile prep's knobs change nothing with the sub-block prep":
        "PREP_FULL == 1 or (SOLVE_APART == 1 and GATE_APART == 1 and INV_PRECISION == 'input' and "
        "MAXNREG_PREP_FULL is None)",
    "the solve kernel's knobs, Akk's dtype and the Gluon prep change nothing with the solve inside the prep":
        "(PREP_FULL == 1 and SOLVE_APART == 1) or (NUM_WARPS_SOLVE == 4 and MAXNREG_SOLVE is None and AKK_BF16 == 1 "
        "and PREP_GLUON == 1)",
    "the Triton prep's warps, cap and gate split change nothing where the Gluon prep runs (Hopper, bf16)":
        "not (PREP_FULL == 1 and SOLVE_APART == 1 and PREP_GLUON == 1) or (NUM_WARPS_PREP == 8 and "
        "MAXNREG_PREP_FULL is None and GATE_APART == 1)",
    "the gate kernel's knobs change nothing where it does not run":
        "(PREP_FULL == 1 and GATE_APART == 1 and not (SOLVE_APART == 1 and PREP_GLUON == 1)) or "
        "(NUM_WARPS_GATE == 4 and GATE_BK == 64)",
    "the Gluon scan's knobs change nothing with USE_GLUON_SCAN = 0":
        "USE_GLUON_SCAN == 1 or (GLUON_SCAN_BV is None and GLUON_SCAN_STAGES is None)",
    "the Triton scan's knobs change only the check shapes where the Gluon scan runs (Hopper, bf16: every bench shape)":
        "USE_GLUON_SCAN == 0 or (BV == 32 and NUM_WARPS == 4 and NUM_STAGES == 3)",
    "the Triton scan's NUM_STAGES chunks fit sm_90's 227 KB of shared memory a block":
        "NUM_STAGES * 128 * (448 + BV) + 256 * BV <= 232448",
    "the Gluon scan's stages fit sm_90's 227 KB of shared memory a block (128 value columns where chosen itself)":
        "GLUON_SCAN_STAGES is None or GLUON_SCAN_STAGES * (57352 + 128 * (GLUON_SCAN_BV or 128)) + "
        "512 * (GLUON_SCAN_BV or 128) <= 232448",
}
LOWER_BOUND = -5.0
L2NORM_EPS = 1e-6
CHUNK = 64  # tokens a chunk; the kernels hard-code 64 = 4 sub-blocks of 16 (the re-centring span)


@triton.jit
def _gate(graw, a, bias, m, LOWER: tl.constexpr):
    """The KDA gate g = LOWER * sigmoid(a (g_raw + dt_bias)), 0 where m is false (padding rows and columns)."""
    return tl.where(m, LOWER * tl.sigmoid(a * (graw + bias[None, :])), 0.0)


@triton.jit
def _sub_front(q_c, k_c, g_c, beta_c, qg_c, sub, t0, T, H, a, bias, scale, prefix,
               offs_r, offs_k, mask_k, K: tl.constexpr, LOWER: tl.constexpr, EPS: tl.constexpr, SDT: tl.constexpr):
    """Everything of sub-block `sub` (16 tokens) that needs no other sub-block. Pointers *_c point at
    the chunk's first token; offsets inside a chunk are int32.

    Loads q, k, g_raw, beta (zeros past T: with k = 0, g = 0 and beta = 0 a padding row leaves the state
    unchanged); L2 norms, gate, the cumulative gate G = prefix + local cumsum; stores Qg = q e^G.
    Returns the stacked re-centred row operands [k; q] e^(G - c) (c = G at the sub-block's first row),
    the column factor kc = k e^(c - G) (<= e^75 at the -5 bound), c, the next prefix, beta k e^G, beta,
    and the rows' offsets and mask.
    """
    lr = sub * 16 + offs_r
    mask_r = t0 + lr < T
    roff = lr * H
    m = mask_r[:, None] & mask_k[None, :]
    off = roff[:, None] * K + offs_k[None, :]
    q = tl.load(q_c + off, mask=m, other=0.0).to(tl.float32)
    k = tl.load(k_c + off, mask=m, other=0.0).to(tl.float32)
    graw = tl.load(g_c + off, mask=m, other=0.0).to(tl.float32)
    beta = tl.load(beta_c + roff, mask=mask_r, other=0.0).to(tl.float32)
    q = q * (scale * tl.math.rsqrt(tl.sum(q * q, 1) + EPS))[:, None]
    k = k * tl.math.rsqrt(tl.sum(k * k, 1) + EPS)[:, None]
    g = _gate(graw, a, bias, m, LOWER)

    cs = tl.cumsum(g, 0)
    first = tl.sum(tl.where(offs_r[:, None] == 0, g, 0.0), 0)
    c = prefix + first
    d = cs - first[None, :]  # G - c <= 0 from the local cumsum: no large prefix rounds it
    rf = tl.exp(d)
    # e^G = e^c e^(G - c): e^c may underflow to 0 only where e^G < e^-87 anyway.
    e_g = rf * tl.exp(c)[None, :]
    tl.store(qg_c + off, (q * e_g).to(qg_c.dtype.element_ty), mask=m)
    kc = k * tl.exp(-d)
    bkg = beta[:, None] * k * e_g
    # k and q rows stacked into one [32, BK] operand: one matmul gives both score blocks, and each warp
    # holds half of the operand instead of all of both (M = 16 replicates the A operand in every warp).
    kq = tl.reshape(tl.permute(tl.join(k * rf, q * rf), (2, 0, 1)), (32, k.shape[1])).to(SDT)
    return kq, kc, c, prefix + tl.sum(g, 0), bkg, beta, roff, mask_r


@triton.jit
def _load_bv(v_c, roff, mask_r, beta, offs_v, mask_v, V: tl.constexpr):
    """beta v of a sub-block (v is read only for U)."""
    v = tl.load(v_c + roff[:, None] * V + offs_v[None, :], mask=mask_r[:, None] & mask_v[None, :], other=0.0)
    return beta[:, None] * v.to(tl.float32)


@triton.jit
def _scores(kq, col, SDT: tl.constexpr):
    """Raw Akk and Aqk blocks: stacked rows (re-centred at c_I) times a column block's factors."""
    s = tl.dot(kq, tl.trans(col.to(SDT)))  # [32, 16]: Akk rows, then Aqk rows
    return tl.split(tl.permute(tl.reshape(s, (2, 16, 16)), (1, 2, 0)))


@triton.jit
def _diag(kq, kc, beta, offs_r, SDT: tl.constexpr):
    """Diagonal blocks: Akk strictly lower times beta_i, Aqk lower including the diagonal."""
    akk, aqk = _scores(kq, kc, SDT)
    akk = tl.where(offs_r[:, None] > offs_r[None, :], akk * beta[:, None], 0.0)
    aqk = tl.where(offs_r[:, None] >= offs_r[None, :], aqk, 0.0)
    return akk, aqk


@triton.jit
def _store_blk(aqk_c, roff, mask_r, col0, blk, offs_r):
    """A 16x16 block of Aqk [.., 64] at column col0, rows masked to t < T."""
    tl.store(aqk_c + roff[:, None] * 64 + col0 + offs_r[None, :], blk.to(aqk_c.dtype.element_ty),
             mask=mask_r[:, None])


@triton.jit
def _inv_unit_lower(A, offs_r, PRODUCT: tl.constexpr):
    """(I + A)^-1 for strictly lower A [16, 16].

    PRODUCT: A is nilpotent (A^16 = 0), so (I + A)^-1 = sum_n (-A)^n = (I - A)(I + A^2)(I + A^4)(I + A^8):
    six 16x16 products in float32 ("ieee": no tf32 rounding), a few barriers each, no dependent chain of
    15 reductions. Otherwise forward substitution one row at a time: row i of the inverse's strict part
    is a + sum_m a[m] X[m, :] with a = -A[i, :], rows m < i done; row i of A is read from A (as a row)
    and from Aᵀ (as a column), so the loop carries only X and one reduction over rows."""
    rows = offs_r[:, None]
    cols = offs_r[None, :]
    eye = (rows == cols).to(tl.float32)
    if PRODUCT:
        a2 = tl.dot(A, A, input_precision="ieee")
        a4 = tl.dot(a2, a2, input_precision="ieee")
        a8 = tl.dot(a4, a4, input_precision="ieee")
        x = tl.dot(eye - A, eye + a2, input_precision="ieee")
        x = tl.dot(x, eye + a4, input_precision="ieee")
        return tl.dot(x, eye + a8, input_precision="ieee")
    At = tl.trans(A)
    X = -A
    for i in tl.static_range(1, 16):
        a_col = -tl.sum(tl.where(cols == i, At, 0.0), 1)  # -A[i, m] indexed by the rows m of X
        a_row = -tl.sum(tl.where(rows == i, A, 0.0), 0)  # -A[i, j] indexed by the columns j
        X = tl.where(rows == i, (a_row + tl.sum(a_col[:, None] * X, 0))[None, :], X)
    return X + eye


@triton.jit
def _store_rows(ptr_c, roff, mask_r, offs_c, mask_c, n_cols: tl.constexpr, x):
    tl.store(ptr_c + roff[:, None] * n_cols + offs_c[None, :], x.to(ptr_c.dtype.element_ty),
             mask=mask_r[:, None] & mask_c[None, :])


@triton.jit
def kda_chunk_prep_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, a_log_ptr, dt_bias_ptr,
    w_ptr, u_ptr, qg_ptr, kd_ptr, aqk_ptr, decay_ptr,
    T, H, NT, scale,
    K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, V_PAD: tl.constexpr,
    LOWER: tl.constexpr, EPS: tl.constexpr, SCORES_FP32: tl.constexpr, INV_PRODUCT: tl.constexpr,
):
    # Sub-blocks I = 0..3 in order. Block forward substitution for the UT transform,
    #   [W_I | U_I] = T_II ([bkg_I | bv_I] - sum_{J<I} Akk_IJ [W_J | U_J]),  T_II = (I + Akk_II)^-1,
    # keeps only the current block row of Akk and the earlier W_J, U_J live, not the whole inverse.
    # Column factors col_J = k_J e^(c_I - G_J) of earlier sub-blocks are carried from centre to centre
    # (times e^(c_I - c_{I-1}) <= 1), and end as Kd_J = col_J e^(G_last - c_3).
    i_t = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    dt = q_ptr.dtype.element_ty
    SDT: tl.constexpr = tl.float32 if SCORES_FP32 else dt  # score matmul operands

    offs_r = tl.arange(0, 16)
    offs_k = tl.arange(0, BK)
    offs_v = tl.arange(0, V_PAD)
    mask_k = offs_k < K
    mask_v = offs_v < V
    zero = tl.zeros([16, 16], dtype=tl.float32)

    a = tl.exp(tl.load(a_log_ptr + i_h).to(tl.float32))
    bias = tl.load(dt_bias_ptr + i_h * K + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    t0 = i_t * 64
    row0 = (i_b.to(tl.int64) * T + t0) * H + i_h  # the chunk's first token in [B * T * H]: int64 once
    q_c = q_ptr + row0 * K
    k_c = k_ptr + row0 * K
    g_c = g_ptr + row0 * K
    v_c = v_ptr + row0 * V
    beta_c = beta_ptr + row0
    w_c = w_ptr + row0 * K
    qg_c = qg_ptr + row0 * K
    kd_c = kd_ptr + row0 * K
    u_c = u_ptr + row0 * V
    aqk_c = aqk_ptr + row0 * 64
    prefix = tl.zeros([BK], dtype=tl.float32)

    # The four sub-blocks are written out, not looped: sub-block I needs the tiles of every J < I, and a
    # Triton kernel cannot hold a list of tiles indexed by a loop variable.
    # ---- sub-block 0
    kq, col0, c, prefix, bkg, beta_s, r0, m0 = _sub_front(
        q_c, k_c, g_c, beta_c, qg_c, 0, t0, T, H, a, bias, scale, prefix, offs_r, offs_k, mask_k, K, LOWER, EPS, SDT)
    a00, s00 = _diag(kq, col0, beta_s, offs_r, SDT)
    _store_blk(aqk_c, r0, m0, 0, s00, offs_r)
    _store_blk(aqk_c, r0, m0, 16, zero, offs_r)
    _store_blk(aqk_c, r0, m0, 32, zero, offs_r)
    _store_blk(aqk_c, r0, m0, 48, zero, offs_r)
    t_inv = _inv_unit_lower(a00, offs_r, INV_PRODUCT).to(dt)
    w0 = tl.dot(t_inv, bkg.to(dt)).to(dt)
    _store_rows(w_c, r0, m0, offs_k, mask_k, K, w0)
    u0 = tl.dot(t_inv, _load_bv(v_c, r0, m0, beta_s, offs_v, mask_v, V).to(dt)).to(dt)
    _store_rows(u_c, r0, m0, offs_v, mask_v, V, u0)

    # ---- sub-block 1
    c_prev = c
    kq, kc, c, prefix, bkg, beta_s, r1, m1 = _sub_front(
        q_c, k_c, g_c, beta_c, qg_c, 1, t0, T, H, a, bias, scale, prefix, offs_r, offs_k, mask_k, K, LOWER, EPS, SDT)
    f = tl.exp(c - c_prev)[None, :]
    col0 = col0 * f
    col1 = kc
    a10, s10 = _scores(kq, col0, SDT)
    a11, s11 = _diag(kq, col1, beta_s, offs_r, SDT)
    _store_blk(aqk_c, r1, m1, 0, s10, offs_r)
    _store_blk(aqk_c, r1, m1, 16, s11, offs_r)
    _store_blk(aqk_c, r1, m1, 32, zero, offs_r)
    _store_blk(aqk_c, r1, m1, 48, zero, offs_r)
    a10 = (a10 * beta_s[:, None]).to(dt)
    t_inv = _inv_unit_lower(a11, offs_r, INV_PRODUCT).to(dt)
    w1 = tl.dot(t_inv, (bkg - tl.dot(a10, w0)).to(dt)).to(dt)
    _store_rows(w_c, r1, m1, offs_k, mask_k, K, w1)
    bv = _load_bv(v_c, r1, m1, beta_s, offs_v, mask_v, V)
    u1 = tl.dot(t_inv, (bv - tl.dot(a10, u0)).to(dt)).to(dt)
    _store_rows(u_c, r1, m1, offs_v, mask_v, V, u1)

    # ---- sub-block 2
    c_prev = c
    kq, kc, c, prefix, bkg, beta_s, r2, m2 = _sub_front(
        q_c, k_c, g_c, beta_c, qg_c, 2, t0, T, H, a, bias, scale, prefix, offs_r, offs_k, mask_k, K, LOWER, EPS, SDT)
    f = tl.exp(c - c_prev)[None, :]
    col0 = col0 * f
    col1 = col1 * f
    col2 = kc
    a20, s20 = _scores(kq, col0, SDT)
    a21, s21 = _scores(kq, col1, SDT)
    a22, s22 = _diag(kq, col2, beta_s, offs_r, SDT)
    _store_blk(aqk_c, r2, m2, 0, s20, offs_r)
    _store_blk(aqk_c, r2, m2, 16, s21, offs_r)
    _store_blk(aqk_c, r2, m2, 32, s22, offs_r)
    _store_blk(aqk_c, r2, m2, 48, zero, offs_r)
    a20 = (a20 * beta_s[:, None]).to(dt)
    a21 = (a21 * beta_s[:, None]).to(dt)
    t_inv = _inv_unit_lower(a22, offs_r, INV_PRODUCT).to(dt)
    w2 = tl.dot(t_inv, (bkg - tl.dot(a20, w0) - tl.dot(a21, w1)).to(dt)).to(dt)
    _store_rows(w_c, r2, m2, offs_k, mask_k, K, w2)
    bv = _load_bv(v_c, r2, m2, beta_s, offs_v, mask_v, V)
    u2 = tl.dot(t_inv, (bv - tl.dot(a20, u0) - tl.dot(a21, u1)).to(dt)).to(dt)
    _store_rows(u_c, r2, m2, offs_v, mask_v, V, u2)

    # ---- sub-block 3
    c_prev = c
    kq, kc, c, prefix, bkg, beta_s, r3, m3 = _sub_front(
        q_c, k_c, g_c, beta_c, qg_c, 3, t0, T, H, a, bias, scale, prefix, offs_r, offs_k, mask_k, K, LOWER, EPS, SDT)
    f = tl.exp(c - c_prev)[None, :]
    col0 = col0 * f
    col1 = col1 * f
    col2 = col2 * f
    col3 = kc
    a30, s30 = _scores(kq, col0, SDT)
    a31, s31 = _scores(kq, col1, SDT)
    a32, s32 = _scores(kq, col2, SDT)
    a33, s33 = _diag(kq, col3, beta_s, offs_r, SDT)
    _store_blk(aqk_c, r3, m3, 0, s30, offs_r)
    _store_blk(aqk_c, r3, m3, 16, s31, offs_r)
    _store_blk(aqk_c, r3, m3, 32, s32, offs_r)
    _store_blk(aqk_c, r3, m3, 48, s33, offs_r)
    a30 = (a30 * beta_s[:, None]).to(dt)
    a31 = (a31 * beta_s[:, None]).to(dt)
    a32 = (a32 * beta_s[:, None]).to(dt)
    t_inv = _inv_unit_lower(a33, offs_r, INV_PRODUCT).to(dt)
    w3 = tl.dot(t_inv, (bkg - tl.dot(a30, w0) - tl.dot(a31, w1) - tl.dot(a32, w2)).to(dt))
    _store_rows(w_c, r3, m3, offs_k, mask_k, K, w3)
    bv = _load_bv(v_c, r3, m3, beta_s, offs_v, mask_v, V)
    u3 = tl.dot(t_inv, (bv - tl.dot(a30, u0) - tl.dot(a31, u1) - tl.dot(a32, u2)).to(dt))
    _store_rows(u_c, r3, m3, offs_v, mask_v, V, u3)

    # ---- state side: prefix is now G_last (padding rows add g = 0); Kd_J = k_J e^(G_last - G_J).
    f = tl.exp(prefix - c)[None, :]
    _store_rows(kd_c, r0, m0, offs_k, mask_k, K, col0 * f)
    _store_rows(kd_c, r1, m1, offs_k, mask_k, K, col1 * f)
    _store_rows(kd_c, r2, m2, offs_k, mask_k, K, col2 * f)
    _store_rows(kd_c, r3, m3, offs_k, mask_k, K, col3 * f)
    decay_off = ((i_b.to(tl.int64) * NT + i_t) * H + i_h) * K
    tl.store(decay_ptr + decay_off + offs_k, tl.exp(prefix), mask=mask_k)


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
def kda_chunk_prep_full_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, a_log_ptr, dt_bias_ptr,
    w_ptr, u_ptr, qg_ptr, kd_ptr, aqk_ptr, decay_ptr, akk_ptr,
    T, H, NT, scale,
    K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, V_PAD: tl.constexpr,
    LOWER: tl.constexpr, EPS: tl.constexpr, INV_PRECISION: tl.constexpr, SOLVE_APART: tl.constexpr,
    GATE_APART: tl.constexpr,
):
    """The same outputs as kda_chunk_prep_kernel (with SOLVE_APART, W holds beta k e^G and U is left to
    kda_chunk_solve_kernel), computed on whole 64-row tiles (tensor-core sized). With GATE_APART, g_ptr is
    G from kda_gate_cumsum_kernel (float32) instead of g_raw, and a_log_ptr, dt_bias_ptr are not read.

    Scores: four 64-row products, one per sub-block centre, each on its own 16 rows (4x the
    multiply-adds of 16-row blocks, in place of their operand replication and dependent chain). The
    inverse of I + Akk: D, the 16x16 diagonal blocks, inverted as (I - D)(I + D^2)(I + D^4)(I + D^8)
    (nilpotent); the rest as I + Akk = (I + D)(I + N), N = (I + D)^-1 L strictly block-lower with
    N^4 = 0, so (I + Akk)^-1 = (I - N)(I + N^2) (I + D)^-1. Ten 64x64 products, no row-by-row chain.
    """
    i_t = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    dt = q_ptr.dtype.element_ty

    offs_t = tl.arange(0, 64)
    offs_k = tl.arange(0, BK)
    offs_v = tl.arange(0, V_PAD)
    mask_t = i_t * 64 + offs_t < T
    mask_k = offs_k < K
    mk = mask_t[:, None] & mask_k[None, :]
    mv = mask_t[:, None] & (offs_v < V)[None, :]
    row0 = (i_b.to(tl.int64) * T + i_t * 64) * H + i_h  # the chunk's first token in [B * T * H]
    rk = (offs_t * H)[:, None] * K + offs_k[None, :]
    rv = (offs_t * H)[:, None] * V + offs_v[None, :]

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
        # from each sub-block) in place of one reduction a centre: 13 us less at bench on the H200 (BENCHMARKS.md).
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

    if SOLVE_APART:
        # Left to kda_chunk_solve_kernel: Akk in float32 (the inverse's input; the input dtype with AKK_BF16),
        # beta k e^G in W's place.
        tl.store(akk_ptr + ((i_b.to(tl.int64) * NT + i_t) * H + i_h) * 4096 + i_ * 64 + j_,
                 akk.to(akk_ptr.dtype.element_ty))
        tl.store(w_ptr + row0 * K + rk, bkg, mask=mk)
    else:
        t_inv = _inv_unit_lower_64(akk, i_, j_, INV_PRECISION, dt).to(dt)
        _solve_w_u(t_inv, bkg, beta, v_ptr + row0 * V, w_ptr + row0 * K, u_ptr + row0 * V, rk, rv, mk, mv)


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
    """kda_chunk_prep_full_kernel with SOLVE_APART (the same outputs), its layouts chosen for its reductions.

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
    """The full-tile prep's solve on its own (SOLVE_APART = 1): reads Akk and beta k e^G (from W's buffer),
    writes W over the latter, and U. Few registers, so several CTAs an SM overlap the inverse's chain."""
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
    # float32): the same products, and 153 against 186 registers at bench (sm_90), three CTAs an SM in place of
    # two. The other precisions take float32 operands (entry() refuses AKK_BF16 with them, so this cast only
    # meets float32 Akk: a guard, should that refusal go).
    akk = tl.load(akk_ptr + ((i_b.to(tl.int64) * NT + i_t) * H + i_h) * 4096 + i_ * 64 + j_)
    if INV_PRECISION != "input":
        akk = akk.to(tl.float32)
    dt = w_ptr.dtype.element_ty
    t_inv = _inv_unit_lower_64(akk, i_, j_, INV_PRECISION, dt).to(dt)
    bkg = tl.load(w_ptr + row0 * K + rk, mask=mk, other=0.0)
    beta = tl.load(beta_ptr + row0 + offs_t * H, mask=mask_t, other=0.0).to(tl.float32)
    _solve_w_u(t_inv, bkg, beta, v_ptr + row0 * V, w_ptr + row0 * K, u_ptr + row0 * V, rk, rv, mk, mv)


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
    """Whether the prep runs as kda_chunk_prep_gluon_kernel (PREP_GLUON above): the full-tile prep with its
    solve apart, bf16 inputs (its products take them as they are), and a Hopper GPU unless forced."""
    if not (PREP_GLUON and PREP_FULL and SOLVE_APART) or q.dtype != torch.bfloat16:
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
    prep_in = (q, k, v, g_raw, beta, A_log, dt_bias)
    prep_out = (w, u, qg, kd, aqk, decay_last)
    sizes = (T, H, NT, K**-0.5)
    if PREP_FULL:
        if NUM_WARPS_PREP < 8:
            raise ValueError(f"the full-tile prep kernel (PREP_FULL = 1) needs NUM_WARPS_PREP >= 8, not "
                             f"{NUM_WARPS_PREP}: with its solve inside, Triton 3.6 compiles its U product at 4 warps "
                             f"with an out-of-range shared-memory access (wrong outputs or an illegal address on the "
                             f"H200); without it (SOLVE_APART = 1) 4 warps has not been checked on a GPU")
        if SOLVE_APART and AKK_BF16 and INV_PRECISION != "input":
            raise ValueError(f"AKK_BF16 = 1 needs INV_PRECISION = 'input' (the only inverse that rounds Akk to the "
                             f"input dtype anyway); INV_PRECISION = {INV_PRECISION!r} keeps float32 operands: "
                             f"set AKK_BF16 = 0")
        # Akk between the two kernels: [B, NT, H, 64, 64], float32 (16 KB a chunk and head) or with AKK_BF16 the
        # input dtype; one contiguous tile a chunk and head.
        akk_dtype = dtype if AKK_BF16 else torch.float32
        akk = torch.empty((B, NT, H, CHUNK, CHUNK), dtype=akk_dtype, device=dev) if SOLVE_APART else w
        gluon_prep = _takes_gluon_prep(q)
        if GATE_APART and not gluon_prep:
            # G, the within-chunk cumulative gate, float32 [B, T, H, K]: the prep kernel reads it in g_raw's place.
            g_cum = torch.empty((B, T, H, K), dtype=torch.float32, device=dev)
            bk_gate = min(GATE_BK, bk)
            kda_gate_cumsum_kernel[(NT, B * H, triton.cdiv(K, bk_gate))](
                g_raw, A_log, dt_bias, g_cum, T, H, K=K, BK=bk_gate, LOWER=LOWER_BOUND, num_warps=NUM_WARPS_GATE,
            )
            prep_in = (q, k, v, g_cum, beta, A_log, dt_bias)
        if gluon_prep:
            kda_chunk_prep_gluon_kernel[(NT, B * H)](
                q, k, g_raw, beta, A_log, dt_bias, w, qg, kd, aqk, decay_last, akk, *sizes, K=K, BK=bk,
                LOWER=LOWER_BOUND, EPS=L2NORM_EPS, num_warps=8,
            )
        else:
            kda_chunk_prep_full_kernel[(NT, B * H)](
                *prep_in, *prep_out, akk, *sizes, K=K, V=V, BK=bk, V_PAD=v_pad, LOWER=LOWER_BOUND,
                EPS=L2NORM_EPS, INV_PRECISION=INV_PRECISION, SOLVE_APART=bool(SOLVE_APART),
                GATE_APART=bool(GATE_APART), num_warps=NUM_WARPS_PREP, maxnreg=MAXNREG_PREP_FULL,
            )
        if SOLVE_APART:
            kda_chunk_solve_kernel[(NT, B * H)](
                akk, beta, v, w, u, T, H, NT, K=K, V=V, BK=bk, V_PAD=v_pad, INV_PRECISION=INV_PRECISION,
                num_warps=NUM_WARPS_SOLVE if min(bk, v_pad) >= 64 else SOLVE_WARPS_SMALL_N, maxnreg=MAXNREG_SOLVE,
            )
    else:
        kda_chunk_prep_kernel[(NT, B * H)](
            *prep_in, *prep_out, *sizes, K=K, V=V, BK=bk, V_PAD=v_pad, LOWER=LOWER_BOUND, EPS=L2NORM_EPS,
            SCORES_FP32=SCORES_FP32, INV_PRODUCT=INV_PRODUCT, num_warps=NUM_WARPS_PREP, maxnreg=MAXNREG_PREP,
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
