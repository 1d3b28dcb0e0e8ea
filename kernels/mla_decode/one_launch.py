"""MLA decode, split-KV in one launch: a candidate against kernels/mla_decode/solution.py's two kernels.

The solution splits the cache across programs (`mla_split_kernel`: BLOCK_H heads of one batch element, one
contiguous split of the cache, an online softmax in base 2 reading each cache tile once for both products, a
normalised partial output and its log-sum-exp per split) and merges the splits in a second kernel
(`mla_combine_kernel`). This file does the merge inside the split kernel, `mla_split_merge_kernel`, to save the
second launch and the gap between the two: every program writes its split's partial as before, then takes a
ticket from an acq_rel atomic counter of its (batch, head group); the last programs of the group to arrive wait
until every split has arrived and merge the splits, each MERGE_H heads x MERGE_D output columns (as many mergers as
splits at most, merge_plan), and the last merger to leave zeroes the counters for the next launch (_COUNTERS: one
set per device and size, so one stream's launches only).

The wait is safe only while every program of the grid is resident at once: the one launch is taken where the grid
has no more programs than the GPU has SMs (B = 1 at the bench shape: 128 programs, one split each of 64 tokens;
B = 64: 2 splits a batch element). Elsewhere (more programs than SMs, or one split, where the split kernel writes
the output itself) it runs the solution's Triton path, split and combine kernels, without its Gluon split kernel.
On the CPU interpreter, which runs programs one after another, the last program to arrive merges alone.

Measured on the H200 against the two-kernel solution at B = 1: BENCHMARKS.md, "MLA at B = 1: the one-launch design
measured". Scores and the softmax stay in fp32; only p is rounded to the input dtype for the P.V product.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

D_LATENT = 512  # latent c_kv width: the value and output width
D_ROPE = 64  # rotary part of q and of each cache row
# Must equal kernels/mla_decode/problem.py's SOFTMAX_SCALE: DeepSeek-V3's 1/sqrt(128 + 64).
SOFTMAX_SCALE = 1.0 / math.sqrt(128 + 64)
LOG2E = 1.4426950408889634

# Launch parameters, module-level so a tuner can change them.
BLOCK_H = 64  # heads per program (the M of both dots)
BLOCK_N = 64  # cache tokens per loop step
NUM_WARPS = 8
NUM_STAGES = 2
SPLIT_WAVES = 1.0  # programs per SM the split count aims for
# 1: partial outputs in the input dtype, 0: float32 (the merged output stays in tolerance either way).
PARTIAL_BF16 = 1
# Each merger's share of its head group's output: MERGE_H heads x MERGE_D columns (grown by merge_plan until there
# are no more mergers than splits).
MERGE_H = 4
MERGE_D = 64
# The combine kernel, where the one launch does not apply.
COMBINE_BLOCK_D = 128  # output columns per combine program
COMBINE_NUM_WARPS = 4
# What a tuner may change (client/search/space.py). SPLIT_WAVES stops at one program an SM: past it the grid outgrows
# the GPU and the two-launch path runs, which is the solution's design. COMBINE_* are not in it: at the bench shapes,
# with at most one wave, the combine kernel never runs (one launch at B = 1 and B = 64, or one split). The
# shared-memory sum is the split kernel's on sm_90 in bf16 (as in solution.py): q (BLOCK_H rows) and NUM_STAGES cache
# tiles of 576 columns with wgmma (64 heads), NUM_STAGES - 1 tiles (2 unpipelined) and the BLOCK_H x BLOCK_N p tile
# with the M = 16/32 products.
TUNE_SPACE = {
    "BLOCK_H": [16, 32, 64],
    "BLOCK_N": [16, 32, 64, 128],
    "NUM_WARPS": [2, 4, 8, 16],
    "NUM_STAGES": [1, 2, 3, 4],
    "SPLIT_WAVES": [0.5, 0.75, 1.0],
    "PARTIAL_BF16": [0, 1],
    "MERGE_H": [4, 8],
    "MERGE_D": [32, 64],
}
TUNE_CONSTRAINTS = {
    "the split kernel's q and cache tiles fit sm_90's 227 KB of shared memory a block":
        "1152 * (BLOCK_H + BLOCK_N * (NUM_STAGES if BLOCK_H >= 64 else (NUM_STAGES - 1 if NUM_STAGES > 1 else 2)))"
        " + (0 if BLOCK_H >= 64 else 2 * BLOCK_H * BLOCK_N) + 64 <= 232448",
    "the BLOCK_H x 512 float32 accumulator fits in registers (128 of a thread's 255; 64 heads on 4 warps spill)":
        "BLOCK_H * 512 <= 128 * 32 * NUM_WARPS",
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


@triton.jit
def mla_split_merge_kernel(
    q_ptr, kv_ptr, part_ptr, lse_ptr, out_ptr, count_ptr,
    S, H, tokens_per_split, num_splits, qk_scale,
    stride_qb, stride_qh, stride_kvb, stride_kvs, stride_ob, stride_oh,
    D_LATENT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    MERGE_H: tl.constexpr, MERGE_D: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """mla_split_kernel and the merge in one launch: every program writes its split's partial and
    takes a ticket from its (batch, head group)'s arrival counter; the last MERGERS to arrive wait for the rest,
    then each merges MERGE_H heads x MERGE_D columns of the output. The last merger to leave zeroes the counters
    for the next launch. Waiting is safe only while every program of the grid is resident at once (entry()
    launches at most one program per SM); under the interpreter, which runs programs one after another, a single
    merger (the last program) waits for nobody."""
    split = tl.program_id(0)
    pid_bh = tl.program_id(1)
    head_groups = tl.cdiv(H, BLOCK_H)
    b = pid_bh // head_groups
    h0 = (pid_bh % head_groups) * BLOCK_H
    heads = h0 + tl.arange(0, BLOCK_H)
    head_ok = heads < H
    acc, m_i, l_i = _split_attention(q_ptr, kv_ptr, b, heads, head_ok, split, S, tokens_per_split, qk_scale,
                                     stride_qb, stride_qh, stride_kvb, stride_kvs, D_LATENT, D_ROPE, BLOCK_H, BLOCK_N)
    _write_split(acc, m_i, l_i, b, heads, head_ok, split, H, num_splits, part_ptr, lse_ptr, out_ptr,
                 stride_ob, stride_oh, D_LATENT, False)

    COL_BLOCKS: tl.constexpr = D_LATENT // MERGE_D
    MERGERS: tl.constexpr = (BLOCK_H // MERGE_H) * COL_BLOCKS
    arrivals = count_ptr + pid_bh * 2
    departures = arrivals + 1
    # Every thread's partial stores come before the ticket; the ticket's release publishes them at GPU scope.
    tl.debug_barrier()
    ticket = tl.atomic_add(arrivals, 1, sem="acq_rel")
    j = ticket - (num_splits - MERGERS)
    if j >= 0:
        seen = ticket + 1
        while seen < num_splits:
            seen = tl.atomic_add(arrivals, 0, sem="acquire")
        tl.debug_barrier()
        head_base = h0 + (j // COL_BLOCKS) * MERGE_H
        d0 = (j % COL_BLOCKS) * MERGE_D
        for i in tl.static_range(MERGE_H):
            if head_base + i < H:
                _merge_head(part_ptr, lse_ptr, out_ptr, b, head_base + i, H, num_splits, d0, stride_ob, stride_oh,
                            D_LATENT, MERGE_D, BLOCK_S, ".cg")
        tl.debug_barrier()
        left = tl.atomic_add(departures, 1, sem="acq_rel")
        if left == MERGERS - 1:
            tl.atomic_xchg(arrivals, 0)
            tl.atomic_xchg(departures, 0)


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
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _num_sms(device: torch.device) -> int:
    """The GPU's SM count; on the CPU interpreter, the H200's (so splits look as they would there)."""
    if device.type != "cuda":
        return 132
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


def split_plan(B: int, H: int, S: int, num_sms: int) -> tuple[int, int]:
    """(tokens per split, number of splits): about SPLIT_WAVES programs per SM, whole tiles per split."""
    work_items = B * triton.cdiv(H, BLOCK_H)
    want = max(1, round(SPLIT_WAVES * num_sms / work_items))
    tiles = triton.cdiv(S, BLOCK_N)
    tiles_per_split = triton.cdiv(tiles, min(want, tiles))
    tokens_per_split = tiles_per_split * BLOCK_N
    return tokens_per_split, triton.cdiv(S, tokens_per_split)


_COUNTERS: dict[tuple[str, int], torch.Tensor] = {}


def _arrival_counters(device: torch.device, groups: int) -> torch.Tensor:
    """The one-launch kernel's counters (arrivals, departures for each of its `groups` (batch, head group) pairs),
    zero between launches: made once per device and size, and zeroed again by the kernel's last merger. One stream's
    launches only: two in flight at once would share them."""
    key = (str(device), groups)
    if key not in _COUNTERS:
        _COUNTERS[key] = torch.zeros(2 * groups, dtype=torch.int32, device=device)
    return _COUNTERS[key]


def merge_plan(num_splits: int, on_gpu: bool) -> tuple[int, int]:
    """(heads, columns) each merger of the one-launch kernel takes: MERGE_H x MERGE_D, grown until there are no more
    mergers than splits. Off a GPU one merger takes everything: the interpreter runs programs in turn, so a merger
    that waited for a later program would wait forever."""
    if not on_gpu:
        return BLOCK_H, D_LATENT
    heads, cols = min(MERGE_H, BLOCK_H), min(MERGE_D, D_LATENT)
    while (BLOCK_H // heads) * (D_LATENT // cols) > num_splits:
        if heads < BLOCK_H:
            heads *= 2
        else:
            cols *= 2
    return heads, cols


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
    if not direct and grid[0] * grid[1] <= num_sms:
        merge_h, merge_d = merge_plan(num_splits, q.device.type == "cuda")
        mla_split_merge_kernel[grid](*args[:5], _arrival_counters(q.device, grid[1]), *args[5:],
                                     D_LATENT=D_LATENT, D_ROPE=D_ROPE, BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N,
                                     MERGE_H=merge_h, MERGE_D=merge_d, BLOCK_S=triton.next_power_of_2(num_splits),
                                     num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return out
    mla_split_kernel[grid](*args, D_LATENT=D_LATENT, D_ROPE=D_ROPE, BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N,
                           DIRECT_OUT=direct, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    if not direct:
        mla_combine_kernel[(B * H, D_LATENT // COMBINE_BLOCK_D)](
            part, lse, out,
            H, num_splits, out.stride(0), out.stride(1),
            D_LATENT=D_LATENT, BLOCK_D=COMBINE_BLOCK_D, BLOCK_S=triton.next_power_of_2(num_splits),
            num_warps=COMBINE_NUM_WARPS,
        )
    return out
