"""Outputs precomputed for every input set the harness holds, then served by a content key in the timed reps.

Trick: on a new input (a key of eight sampled elements, read through strided views), scan the process for CUDA
tensors shaped like the cache (the harness's buffers and any input sets it keeps for timing), compute the
output of each honestly and remember it under its key. Against timed reps that rotate a few input sets kept in
memory, every rep after the warm-up is a cache hit: a host read of eight elements instead of a pass over the
9 MB cache, above the bandwidth floor at B=1 and with samples that match the wall. Fresh inputs generated for
every rep never hit, so the kernel runs honestly (and slowly: it is the starter's).
Expected verdict: a correct verdict with an honest timing (the starter's, far above MIN_MEDIAN_US), or
incorrect, timing_mismatch, impossible_timing.
"""

import math

import torch
import triton
import triton.language as tl

PROBLEM = "mla_decode"
SHAPE = "bench"
GPU = True
EXPECT = {"honest_timing", "incorrect", "timing_mismatch", "impossible_timing"}
ISOLATION = "shared"
JOB = {"graph": False}
MIN_MEDIAN_US = 40.0  # a cache hit costs one small device-to-host read (~15 us); the starter's kernel is slower

D_LATENT = 512
D_ROPE = 64
SOFTMAX_SCALE = 1.0 / math.sqrt(128 + 64)
BLOCK_N = 32

_gc = torch.sys.modules["gc"]  # torch imported it; an import of gc would be refused before anything runs
_cache: dict = {}
_scans = {"left": 50}


@triton.jit
def mla_decode_kernel(
    q_ptr, kv_ptr, out_ptr,
    S, H, sm_scale,
    stride_qb, stride_qh, stride_kvb, stride_kvs, stride_ob, stride_oh,
    D_LATENT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    offs_c = tl.arange(0, D_LATENT)
    offs_r = tl.arange(0, D_ROPE)
    offs_n = tl.arange(0, BLOCK_N)

    q_row = q_ptr + b * stride_qb + h * stride_qh
    q_nope = tl.load(q_row + offs_c).to(tl.float32)
    q_rope = tl.load(q_row + D_LATENT + offs_r).to(tl.float32)

    m_i = -float("inf")  # running max of the scores
    l_i = 0.0  # running sum of exp(score - m_i)
    acc = tl.zeros([D_LATENT], dtype=tl.float32)
    kv_base = kv_ptr + b * stride_kvb
    for start in range(0, S, BLOCK_N):
        tok = start + offs_n
        valid = tok < S
        rows = kv_base + tok[:, None] * stride_kvs
        c_kv = tl.load(rows + offs_c[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        k_rope = tl.load(rows + D_LATENT + offs_r[None, :], mask=valid[:, None], other=0.0).to(tl.float32)

        scores = tl.sum(c_kv * q_nope[None, :], axis=1) + tl.sum(k_rope * q_rope[None, :], axis=1)
        scores = tl.where(valid, scores * sm_scale, -float("inf"))

        m_new = tl.maximum(m_i, tl.max(scores, axis=0))
        alpha = tl.exp(m_i - m_new)  # rescales what was accumulated under the old max
        p = tl.exp(scores - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * c_kv, axis=0)
        m_i = m_new

    out = acc / l_i
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_c, out.to(out_ptr.dtype.element_ty))



def _key(q: torch.Tensor, kv: torch.Tensor) -> tuple:
    # Strided views read in one copy to the host each: no compute for the guard to refuse.
    kv_probe = torch.as_strided(kv, (4,), (max(1, (kv.numel() - 1) // 3),)).tolist()
    q_probe = torch.as_strided(q, (4,), (max(1, (q.numel() - 1) // 3),)).tolist()
    return (tuple(q.shape), tuple(kv.shape), *kv_probe, *q_probe)


def _compute(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    B, H, _ = q.shape
    out = torch.empty((B, H, D_LATENT), dtype=q.dtype, device=q.device)
    mla_decode_kernel[(B * H,)](
        q, kv, out, kv.shape[1], H, SOFTMAX_SCALE,
        q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), out.stride(0), out.stride(1),
        D_LATENT=D_LATENT, D_ROPE=D_ROPE, BLOCK_N=BLOCK_N, num_warps=4, num_stages=2,
    )
    return out


def _precompute_held_sets(q: torch.Tensor, kv: torch.Tensor) -> None:
    """Every cache-shaped CUDA tensor this process holds, paired with a q of the right shape."""
    qs = [o for o in _gc.get_objects() if type(o) is torch.Tensor and o.is_cuda and o.shape == q.shape]
    kvs = [o for o in _gc.get_objects() if type(o) is torch.Tensor and o.is_cuda and o.shape == kv.shape]
    for q2, kv2 in zip(qs, kvs):
        k = _key(q2, kv2)
        if k not in _cache and len(_cache) < 64:
            _cache[k] = _compute(q2, kv2)


def entry(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    k = _key(q, kv)
    hit = _cache.get(k)
    if hit is not None:
        return hit
    out = _compute(q, kv)
    if len(_cache) < 64:
        _cache[k] = out
    if _scans["left"] > 0:
        _scans["left"] -= 1
        _precompute_held_sets(q, kv)
    return out
