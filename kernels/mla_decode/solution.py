"""MLA decode, split-KV: the project's fast kernel (the bar an agent's candidate must beat).

Two kernels. `mla_split_kernel` gives each program BLOCK_H heads of one batch element and one
contiguous split of the cache; it walks its split in tiles of BLOCK_N tokens with an online
softmax in base 2, reading each cache tile once for both products: scores = q_nope . c_kvᵀ +
q_rope . k_ropeᵀ (tensor cores, heads as M), then acc += p . c_kv (the same c_kv tile as values).
It writes its split's normalised partial output and log-sum-exp. `mla_combine_kernel` merges the
splits of each (batch, head) by their log-sum-exp. When one split is enough (a batch large enough to
fill the GPU by itself: B > 264 with the defaults) the first kernel writes the output and the second is
not launched. On a GPU, splits of two or more tiles (B = 64: two splits of 64 tiles each) run the same
program written in Gluon, `mla_split_gluon_kernel`, whose cache copies are issued as soon as a buffer frees
(figures in BENCHMARKS.md, "Fifth round"). A one-launch variant is kernels/mla_decode/one_launch.py.

Why split: at B=1 the whole cache is 9.4 MB, a 2.2 us DRAM floor, and 64 heads in one program give
one program per batch element: splitting S is the only way to put all 132 SMs on the read. Why
all heads (or many) in a program: every program that holds a head group re-reads its split of the
cache, so fewer, larger head groups mean less traffic; tl.dot wants M >= 16 anyway (64 for wgmma).
The split count is chosen from the SM count so that about SPLIT_WAVES programs land per SM.
Scores and the softmax stay in fp32 (bf16 scores fail the tolerance); only p is rounded to the
input dtype for the P.V product, as in any flash-attention kernel.
"""

from __future__ import annotations

import functools
import math

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

D_LATENT = 512  # latent c_kv width: the value and output width
D_ROPE = 64  # rotary part of q and of each cache row
# Must equal kernels/mla_decode/problem.py's SOFTMAX_SCALE: DeepSeek-V3's 1/sqrt(128 + 64).
SOFTMAX_SCALE = 1.0 / math.sqrt(128 + 64)
LOG2E = 1.4426950408889634

# Launch parameters, module-level so a tuner can change them. A batch that alone gives the GPU
# less than a wave of (batch, head group) programs is "small" and splits S harder.
BLOCK_H = 64  # heads per program (the M of both dots)
BLOCK_N = 64  # cache tokens per loop step
NUM_WARPS = 8
NUM_STAGES = 2
SPLIT_WAVES = 1.0  # programs per SM the split count aims for
# 1: partial outputs in the input dtype, 0: float32. bf16 halves the partials' traffic (16.8 MB of fp32 at
# B=1, more than the cache itself); the merged output stays in tolerance.
PARTIAL_BF16 = 1
COMBINE_BLOCK_D = 128  # output columns per combine program
COMBINE_NUM_WARPS = 4  # a combine program reads num_splits rows of COMBINE_BLOCK_D partial columns
# The split kernel in Gluon (mla_split_gluon_kernel): the same math with the cache pipeline written out, q and
# two cache tiles in shared memory by TMA, and the next-but-one tile's copy issued as soon as the P.V product
# that read its buffer has finished, so a copy is in flight through the whole of each step. Triton's pipeliner
# issues the next tile's copy after the P.V product and waits for it at the top of the next step (its loads
# overlap only that product). 0: never; 1: on a Hopper GPU, for 16-bit inputs whose splits walk at least
# GLUON_MIN_TILES tiles of BLOCK_N tokens (a split of one tile has nothing to pipeline, and the Triton kernel is the
# faster there; the interpreter cannot run Gluon: the CPU takes mla_split_kernel); 2: always (to compile it without
# a GPU).
USE_GLUON = 1
GLUON_MIN_TILES = 2
# The Gluon kernel's cache tile (tokens) and buffers: q (73 KB) and GLUON_STAGES tiles of GLUON_BLOCK_N x 576 must
# fit sm_90's 227 KB of shared memory (64-token tiles: 2 stages; 32-token tiles: up to 4; smaller tiles double a
# step's fixed cost). In TUNE_SPACE, with a constraint that rules out the pairs that do not fit.
GLUON_BLOCK_N = 64
GLUON_STAGES = 2
# What a tuner may change (client/search/space.py): each name is a module-level constant above, and the combinations
# ruled out before they are tried, each with why. The shared-memory sums are sm_90 compiles of the bench shapes in
# bf16 (576 columns of 2 bytes a row): the split kernel holds q (BLOCK_H rows) and NUM_STAGES cache tiles with wgmma
# (64 heads), NUM_STAGES - 1 tiles (2 unpipelined) and the BLOCK_H x BLOCK_N p tile with the M = 16/32 products;
# the Gluon kernel q (64 rows), GLUON_STAGES tiles and 4 KB of layout scratch and barriers.
TUNE_SPACE = {
    "BLOCK_H": [16, 32, 64],
    "BLOCK_N": [16, 32, 64, 128],
    "NUM_WARPS": [2, 4, 8, 16],
    "NUM_STAGES": [1, 2, 3, 4],
    "SPLIT_WAVES": [0.5, 0.75, 1.0, 1.5, 2.0, 3.0],
    "PARTIAL_BF16": [0, 1],
    "COMBINE_BLOCK_D": [32, 64, 128, 256],
    "COMBINE_NUM_WARPS": [1, 2, 4, 8],
    "USE_GLUON": [0, 1],
    "GLUON_MIN_TILES": [1, 2, 4],
    "GLUON_BLOCK_N": [16, 32, 64, 128],
    "GLUON_STAGES": [1, 2, 3, 4],
}
TUNE_CONSTRAINTS = {
    "the split kernel's q and cache tiles fit sm_90's 227 KB of shared memory a block":
        "1152 * (BLOCK_H + BLOCK_N * (NUM_STAGES if BLOCK_H >= 64 else (NUM_STAGES - 1 if NUM_STAGES > 1 else 2)))"
        " + (0 if BLOCK_H >= 64 else 2 * BLOCK_H * BLOCK_N) + 64 <= 232448",
    "the BLOCK_H x 512 float32 accumulator fits in registers (128 of a thread's 255; 64 heads on 4 warps spill)":
        "BLOCK_H * 512 <= 128 * 32 * NUM_WARPS",
    "USE_GLUON changes nothing unless a program holds 64 heads": "BLOCK_H == 64 or USE_GLUON == 1",
    "the Gluon kernel's knobs change nothing where it never runs (fewer than 64 heads a program, or USE_GLUON = 0)":
        "(BLOCK_H == 64 and USE_GLUON == 1) or (GLUON_MIN_TILES == 2 and GLUON_BLOCK_N == 64 and GLUON_STAGES == 2)",
    "the Gluon kernel's q and cache tiles fit sm_90's 227 KB of shared memory a block":
        "1152 * (64 + GLUON_STAGES * GLUON_BLOCK_N) + 4160 <= 232448",
}


@triton.jit
def _online_softmax_step(q_nope, q_rope, c_kv, k_rope, valid, qk_scale, m_i, l_i, acc):
    """One cache tile: scores from both parts of q, the base-2 online softmax, acc += p . c_kv."""
    s = tl.dot(q_nope, tl.trans(c_kv))
    s = tl.dot(q_rope, tl.trans(k_rope), s)
    s = tl.where(valid[None, :], s * qk_scale, -float("inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = tl.dot(p.to(c_kv.dtype), c_kv, acc * alpha[:, None])
    return m_new, l_i, acc


@triton.jit
def _write_split(acc, m_i, l_i, b, heads, head_ok, split, H, num_splits, part_ptr, lse_ptr, out_ptr,
                 stride_ob, stride_oh, D_LATENT: tl.constexpr, DIRECT_OUT: tl.constexpr):
    """The normalised output of a split: the result itself (one split) or a partial and its base-2 LSE."""
    offs_c = tl.arange(0, D_LATENT)
    out = acc * (1.0 / l_i)[:, None]  # one reciprocal a row, not a division an element
    if DIRECT_OUT:
        o_rows = out_ptr + b.to(tl.int64) * stride_ob + heads[:, None] * stride_oh
        tl.store(o_rows + offs_c[None, :], out.to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
    else:
        # partials: [B, H, num_splits, D_LATENT]; lse: [B, H, num_splits] (base 2)
        row = (b.to(tl.int64) * H + heads) * num_splits + split
        tl.store(part_ptr + row[:, None] * D_LATENT + offs_c[None, :], out.to(part_ptr.dtype.element_ty),
                 mask=head_ok[:, None])
        tl.store(lse_ptr + row, m_i + tl.log2(l_i), mask=head_ok)


@triton.jit
def _split_attention(q_ptr, kv_ptr, b, heads, head_ok, split, S, tokens_per_split, qk_scale,
                     stride_qb, stride_qh, stride_kvb, stride_kvs,
                     D_LATENT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr):
    """One split of the cache for BLOCK_H heads: (acc, running max, running sum) of its online softmax."""
    offs_c = tl.arange(0, D_LATENT)
    offs_r = tl.arange(0, D_ROPE)
    offs_n = tl.arange(0, BLOCK_N)
    q_rows = q_ptr + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh
    q_nope = tl.load(q_rows + offs_c[None, :], mask=head_ok[:, None], other=0.0)
    q_rope = tl.load(q_rows + D_LATENT + offs_r[None, :], mask=head_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_H], -float("inf"), dtype=tl.float32)  # running max, base-2 units
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, D_LATENT], dtype=tl.float32)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, S)
    kv_base = kv_ptr + b.to(tl.int64) * stride_kvb
    for n0 in range(start, end, BLOCK_N):
        tok = n0 + offs_n
        valid = tok < end
        rows = kv_base + tok[:, None] * stride_kvs
        c_kv = tl.load(rows + offs_c[None, :], mask=valid[:, None], other=0.0)
        k_rope = tl.load(rows + D_LATENT + offs_r[None, :], mask=valid[:, None], other=0.0)
        m_i, l_i, acc = _online_softmax_step(q_nope, q_rope, c_kv, k_rope, valid, qk_scale, m_i, l_i, acc)
    return acc, m_i, l_i


@triton.jit
def mla_split_kernel(
    q_ptr, kv_ptr, part_ptr, lse_ptr, out_ptr,
    S, H, tokens_per_split, num_splits, qk_scale,
    stride_qb, stride_qh, stride_kvb, stride_kvs, stride_ob, stride_oh,
    D_LATENT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    DIRECT_OUT: tl.constexpr,
):
    split = tl.program_id(0)
    pid_bh = tl.program_id(1)
    head_groups = tl.cdiv(H, BLOCK_H)
    b = pid_bh // head_groups
    heads = (pid_bh % head_groups) * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < H
    acc, m_i, l_i = _split_attention(q_ptr, kv_ptr, b, heads, head_ok, split, S, tokens_per_split, qk_scale,
                                     stride_qb, stride_qh, stride_kvb, stride_kvs, D_LATENT, D_ROPE, BLOCK_H, BLOCK_N)
    _write_split(acc, m_i, l_i, b, heads, head_ok, split, H, num_splits, part_ptr, lse_ptr, out_ptr,
                 stride_ob, stride_oh, D_LATENT, DIRECT_OUT)


@triton.jit
def _merge_head(part_ptr, lse_ptr, out_ptr, b, h, H, num_splits, d0, stride_ob, stride_oh,
                D_LATENT: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, CACHE: tl.constexpr):
    """Columns d0 .. d0 + BLOCK_D of one head's output: its splits' partials weighted by their base-2 LSEs
    (BLOCK_S >= num_splits). CACHE ".cg" reads past L1, for partials written by this same launch on other SMs."""
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = d0 + tl.arange(0, BLOCK_D)
    row0 = (b.to(tl.int64) * H + h) * num_splits
    lse = tl.load(lse_ptr + row0 + offs_s, mask=offs_s < num_splits, other=-float("inf"), cache_modifier=CACHE)
    m = tl.max(lse, axis=0)
    w = tl.exp2(lse - m)
    w = w / tl.sum(w, axis=0)
    part = tl.load(part_ptr + (row0 + offs_s[:, None]) * D_LATENT + offs_d[None, :],
                   mask=offs_s[:, None] < num_splits, other=0.0, cache_modifier=CACHE).to(tl.float32)
    out = tl.sum(part * w[:, None], axis=0)
    tl.store(out_ptr + b.to(tl.int64) * stride_ob + h * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty))


@gluon.jit
def _issue_tile(kv_desc, rope_desc, row, bar, kv_dst, rope_dst, D_LATENT: gl.constexpr):
    """One cache tile (latent and rope columns) into a stage's buffers; `bar` completes when both land."""
    mbarrier.expect(bar, kv_desc.block_type.nbytes + rope_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(kv_desc, [row, 0], bar, kv_dst)
    tma.async_copy_global_to_shared(rope_desc, [row, D_LATENT], bar, rope_dst)


@gluon.jit
def mla_split_gluon_kernel(
    q_desc, q_rope_desc, kv_desc, rope_desc, part_ptr, lse_ptr, out_ptr,
    S, H, tokens_per_split, num_splits, qk_scale, stride_ob, stride_oh,
    D_LATENT: gl.constexpr, STAGES: gl.constexpr, DIRECT_OUT: gl.constexpr,
):
    """mla_split_kernel's program (one split, 64 heads of a batch element) with its pipeline explicit.

    q [B * H, 576] and the cache [B * S, 576] are read by TMA (host-side descriptors: boxes of 64 heads' or
    GLUON_BLOCK_N tokens' rows, of the 512 latent and of the 64 rope columns). STAGES buffers: tile
    i + STAGES's copy is issued into tile i's buffers as soon as the P.V product that read them has finished,
    so copies are in flight through every step (with two stages, one tile's copy has the whole of step i + 1
    to land). Rows of a tile past this split's end are masked out of the softmax (past B * S the copy fills
    zeros); heads past H (a head block running into the next batch element's rows) are computed and not
    stored. The epilogue is _write_split's in Gluon (a @gluon.jit kernel cannot call a @triton.jit helper).
    Eight warps: each wgmma's M is the 64 heads of one warpgroup, the two warpgroups split the N columns
    (32 of the scores' 64 tokens, 256 of the output's 512 columns each)."""
    BLOCK_H: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = kv_desc.block_type.shape[0]
    D_ROPE: gl.constexpr = rope_desc.block_type.shape[1]
    dtype: gl.constexpr = kv_desc.dtype
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                    instr_shape=[16, BLOCK_N // 2, 16])
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                    instr_shape=[16, D_LATENT // 2, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    rows_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    rows_o: gl.constexpr = gl.SliceLayout(1, mma_o)

    split = gl.program_id(0)
    pid_bh = gl.program_id(1)
    head_groups = gl.cdiv(H, BLOCK_H)
    b = pid_bh // head_groups
    h0 = (pid_bh % head_groups) * BLOCK_H
    start = split * tokens_per_split
    end = gl.minimum(start + tokens_per_split, S)
    n_tiles = gl.cdiv(end - start, BLOCK_N)
    row0 = b * S + start  # the split's first cache row in [B * S, 576]

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_H, D_LATENT], q_desc.layout)
    qr_smem = gl.allocate_shared_memory(dtype, [BLOCK_H, D_ROPE], q_rope_desc.layout)
    kv_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D_LATENT], kv_desc.layout)
    kr_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D_ROPE], rope_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for j in gl.static_range(STAGES):
        mbarrier.init(ready.index(j), count=1)
    fence_async_shared()

    mbarrier.expect(q_bar, q_desc.block_type.nbytes + q_rope_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [b * H + h0, 0], q_bar, q_smem)
    tma.async_copy_global_to_shared(q_rope_desc, [b * H + h0, D_LATENT], q_bar, qr_smem)
    for j in gl.static_range(STAGES):
        if j < n_tiles:
            _issue_tile(kv_desc, rope_desc, row0 + j * BLOCK_N, ready.index(j), kv_smem.index(j), kr_smem.index(j),
                        D_LATENT)

    m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, layout=rows_s)  # running max, base-2 units
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=rows_s)
    acc = gl.zeros([BLOCK_H, D_LATENT], gl.float32, layout=mma_o)
    s_zero = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=mma_s)
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_s))
    mbarrier.wait(q_bar, 0)
    for i in range(n_tiles):
        buf = i % STAGES
        mbarrier.wait(ready.index(buf), (i // STAGES) & 1)
        kv = kv_smem.index(buf)
        kr = kr_smem.index(buf)
        s = warpgroup_mma(q_smem, kv.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma(qr_smem, kr.permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(0, deps=[s])
        valid = start + i * BLOCK_N + offs_n < end
        s = gl.where(valid[None, :], s * qk_scale, -float("inf"))
        m_new = gl.maximum(m_i, gl.max(s, axis=1))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + gl.sum(p, axis=1)
        m_i = m_new
        acc = acc * gl.convert_layout(alpha, rows_o)[:, None]
        acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), kv, acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=[acc])
        if i + STAGES < n_tiles:  # this stage's buffers are free: the P.V product that read them is done
            _issue_tile(kv_desc, rope_desc, row0 + (i + STAGES) * BLOCK_N, ready.index(buf), kv, kr, D_LATENT)
    mbarrier.invalidate(q_bar)
    for j in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(j))

    heads_o = h0 + gl.arange(0, BLOCK_H, layout=rows_o)
    offs_c = gl.arange(0, D_LATENT, layout=gl.SliceLayout(0, mma_o))
    out = acc * gl.convert_layout(1.0 / l_i, rows_o)[:, None]
    if DIRECT_OUT:
        o_rows = out_ptr + b.to(gl.int64) * stride_ob + heads_o[:, None] * stride_oh
        gl.store(o_rows + offs_c[None, :], out.to(out_ptr.dtype.element_ty), mask=(heads_o < H)[:, None])
    else:
        row = (b.to(gl.int64) * H + heads_o) * num_splits + split
        gl.store(part_ptr + row[:, None] * D_LATENT + offs_c[None, :], out.to(part_ptr.dtype.element_ty),
                 mask=(heads_o < H)[:, None])
        heads_s = h0 + gl.arange(0, BLOCK_H, layout=rows_s)
        gl.store(lse_ptr + (b.to(gl.int64) * H + heads_s) * num_splits + split, m_i + gl.log2(l_i),
                 mask=heads_s < H)


@triton.jit
def mla_combine_kernel(
    part_ptr, lse_ptr, out_ptr,
    H, num_splits, stride_ob, stride_oh,
    D_LATENT: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """The splits' merge as a kernel of its own: one program a (batch, head) and BLOCK_D output columns."""
    pid_bh = tl.program_id(0)
    _merge_head(part_ptr, lse_ptr, out_ptr, pid_bh // H, pid_bh % H, H, num_splits, tl.program_id(1) * BLOCK_D,
                stride_ob, stride_oh, D_LATENT, BLOCK_D, BLOCK_S, "")


@functools.cache
def _device_facts(device_index: int) -> tuple[int, int]:
    """(compute capability major, SM count) of a GPU."""
    props = torch.cuda.get_device_properties(device_index)
    return props.major, props.multi_processor_count


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _on_hopper(device: torch.device) -> bool:
    """The Gluon kernel is written for Hopper's wgmma and TMA: elsewhere the Triton kernels run."""
    return device.type == "cuda" and _device_facts(_index(device))[0] == 9


def _num_sms(device: torch.device) -> int:
    """The GPU's SM count; on the CPU interpreter, the H200's (so splits look as they would there)."""
    return _device_facts(_index(device))[1] if device.type == "cuda" else 132


def split_plan(B: int, H: int, S: int, num_sms: int) -> tuple[int, int]:
    """(tokens per split, number of splits): about SPLIT_WAVES programs per SM, whole tiles per split."""
    work_items = B * triton.cdiv(H, BLOCK_H)
    want = max(1, round(SPLIT_WAVES * num_sms / work_items))
    tiles = triton.cdiv(S, BLOCK_N)
    tiles_per_split = triton.cdiv(tiles, min(want, tiles))
    tokens_per_split = tiles_per_split * BLOCK_N
    return tokens_per_split, triton.cdiv(S, tokens_per_split)


def _takes_gluon(q: torch.Tensor, kv: torch.Tensor, tokens_per_split: int) -> bool:
    """Whether the split runs as mla_split_gluon_kernel (USE_GLUON above), on a Hopper GPU unless forced. Its
    layouts are written for 64 heads a program (it runs at 8 warps whatever NUM_WARPS, which is the Triton
    kernel's); its descriptors view q and the cache as 2-D row-major tensors of one 16-bit dtype whose start TMA
    can address (16-byte aligned), and its tiles must end where a split does (splits of whole GLUON_BLOCK_N
    tiles)."""
    if not USE_GLUON or BLOCK_H != 64 or tokens_per_split % GLUON_BLOCK_N:
        return False
    if USE_GLUON == 1 and (not _on_hopper(q.device) or tokens_per_split < GLUON_MIN_TILES * BLOCK_N):
        return False
    if q.dtype not in (torch.bfloat16, torch.float16) or kv.dtype != q.dtype:
        return False
    return q.is_contiguous() and kv.is_contiguous() and q.data_ptr() % 16 == 0 and kv.data_ptr() % 16 == 0


def _gluon_descriptors(q: torch.Tensor, kv: torch.Tensor) -> tuple[TensorDescriptor, ...]:
    """TMA descriptors of q [B * H, 576] and the cache [B * S, 576]: latent and rope column blocks, in boxes of
    BLOCK_H heads and GLUON_BLOCK_N tokens."""
    dtype = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    q2 = q.reshape(-1, D_LATENT + D_ROPE)
    kv2 = kv.reshape(-1, D_LATENT + D_ROPE)

    def described(t: torch.Tensor, rows: int, cols: int) -> TensorDescriptor:
        layout = gl.NVMMASharedLayout.get_default_for([rows, cols], dtype)
        return TensorDescriptor.from_tensor(t, [rows, cols], layout)

    return (described(q2, BLOCK_H, D_LATENT), described(q2, BLOCK_H, D_ROPE),
            described(kv2, GLUON_BLOCK_N, D_LATENT), described(kv2, GLUON_BLOCK_N, D_ROPE))


def entry(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    B, H, D = q.shape
    S = kv.shape[1]
    if D != D_LATENT + D_ROPE or kv.shape != (B, S, D):
        raise ValueError(f"expected q (B, H, {D_LATENT + D_ROPE}) and kv (B, S, {D}); got {tuple(q.shape)}, "
                         f"{tuple(kv.shape)}")
    if q.stride(2) != 1 or kv.stride(2) != 1:
        raise ValueError("the last dimension of q and kv must be contiguous")
    out = torch.empty((B, H, D_LATENT), dtype=q.dtype, device=q.device)
    num_sms = _num_sms(q.device)
    tokens_per_split, num_splits = split_plan(B, H, S, num_sms)
    direct = num_splits == 1
    if direct:
        part = lse = out  # unused by the kernel when DIRECT_OUT
    else:
        part_dtype = q.dtype if PARTIAL_BF16 else torch.float32
        part = torch.empty((B, H, num_splits, D_LATENT), dtype=part_dtype, device=q.device)
        lse = torch.empty((B, H, num_splits), dtype=torch.float32, device=q.device)
    grid = (num_splits, B * triton.cdiv(H, BLOCK_H))
    args = (q, kv, part, lse, out, S, H, tokens_per_split, num_splits, SOFTMAX_SCALE * LOG2E,
            q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), out.stride(0), out.stride(1))
    consts = dict(D_LATENT=D_LATENT, D_ROPE=D_ROPE, BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N, DIRECT_OUT=direct,
                  num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    gluon = _takes_gluon(q, kv, tokens_per_split)
    if gluon:
        mla_split_gluon_kernel[grid](
            *_gluon_descriptors(q, kv), part, lse, out, S, H, tokens_per_split, num_splits, SOFTMAX_SCALE * LOG2E,
            out.stride(0), out.stride(1), D_LATENT=D_LATENT, STAGES=GLUON_STAGES, DIRECT_OUT=direct, num_warps=8,
        )
    else:
        mla_split_kernel[grid](*args, **consts)
    if not direct:
        mla_combine_kernel[(B * H, D_LATENT // COMBINE_BLOCK_D)](
            part, lse, out,
            H, num_splits, out.stride(0), out.stride(1),
            D_LATENT=D_LATENT, BLOCK_D=COMBINE_BLOCK_D, BLOCK_S=triton.next_power_of_2(num_splits),
            num_warps=COMBINE_NUM_WARPS,
        )
    return out
