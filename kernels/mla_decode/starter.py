"""MLA decode, the simplest correct Triton kernel: one program per (batch, head), a loop over S.

Each program holds its query row (512 + 64) and walks the cache in tiles of BLOCK_N tokens with an
online softmax in fp32: scores = q . kv_tile over both parts, a running max and sum, and an fp32
accumulator of the 512 latent columns. The tile of c_kv loaded for the scores is reused as the
values, so each cache row is read once per program.

Correct, not fast. Every head re-reads the whole cache (H times the DRAM floor), B*H programs
cannot fill the GPU at B=1, and the dot products are tl.sum over products instead of tl.dot on
tensor cores. Room to improve: several heads per program (tl.dot with heads as M), split-KV
across programs with a merge, exp2 with the scale folded in, the launch parameters.
"""

import math

import torch
import triton
import triton.language as tl

D_LATENT = 512  # latent c_kv width: the value and output width
D_ROPE = 64  # rotary part of q and of each cache row
# Must equal kernels/mla_decode/problem.py's SOFTMAX_SCALE: DeepSeek-V3's 1/sqrt(128 + 64).
SOFTMAX_SCALE = 1.0 / math.sqrt(128 + 64)

# Launch parameters, module-level so a tuner can change them.
BLOCK_N = 32  # cache tokens per loop step
NUM_WARPS = 4
NUM_STAGES = 2
# What a tuner may change (client/search/space.py): each name is a module-level constant above, and the
# combinations ruled out before they are tried, each with why.
TUNE_SPACE = {"BLOCK_N": [8, 16, 32, 64, 128], "NUM_WARPS": [1, 2, 4, 8, 16], "NUM_STAGES": [1, 2, 3]}
TUNE_CONSTRAINTS = {
    # sm_90 compiles of the bench shape: 4 warps at 32 tokens already spill 112 bytes a thread, 64 tokens 648.
    "the BLOCK_N x 512 float32 cache tile fits in registers (128 of a thread's 255)":
        "BLOCK_N * 512 <= 128 * 32 * NUM_WARPS",
}


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


def entry(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    B, H, D = q.shape
    S = kv.shape[1]
    assert D == D_LATENT + D_ROPE and kv.shape == (B, S, D), (q.shape, kv.shape)
    assert q.stride(2) == 1 and kv.stride(2) == 1, "the last dimension must be contiguous"
    out = torch.empty((B, H, D_LATENT), dtype=q.dtype, device=q.device)
    mla_decode_kernel[(B * H,)](
        q, kv, out,
        S, H, SOFTMAX_SCALE,
        q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), out.stride(0), out.stride(1),
        D_LATENT=D_LATENT, D_ROPE=D_ROPE, BLOCK_N=BLOCK_N,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return out
