"""KDA with the final state returned in bfloat16 where the problem says float32.

Trick: the state is the largest write of a short sequence, and its tolerance (rel_err 1e-2, atol 2e-2) is wide
enough for bf16 rounding (about 4e-3): a comparison that converts to float64 first passes it. Everything else
is the honest recurrent kernel (the starter's). The contract says final_state is float32.
Expected verdict: wrong_output (or a dtype-specific class).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "kda"
SHAPE = "small"
GPU = False
EXPECT = {"wrong_output", "wrong_dtype"}
ISOLATION = "shared"

BV = 32
NUM_WARPS = 4
LOWER_BOUND = -5.0
L2NORM_EPS = 1e-6


@triton.jit
def kda_recurrent_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, a_log_ptr, dt_bias_ptr, h0_ptr,
    o_ptr, ht_ptr,
    T, H, scale,
    K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BLOCK_V: tl.constexpr,
    HAS_INITIAL_STATE: tl.constexpr, LOWER: tl.constexpr, EPS: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H

    offs_k = tl.arange(0, BK)
    offs_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V
    mask_s = mask_k[:, None] & mask_v[None, :]

    # Per-head gate parameters: exp(A_log[h]) and dt_bias[h, :].
    a = tl.exp(tl.load(a_log_ptr + i_h).to(tl.float32))
    bias = tl.load(dt_bias_ptr + i_h * K + offs_k, mask=mask_k, other=0.0).to(tl.float32)

    # Pointers to token 0 of this (batch, head); a token step moves H * K (or H * V) elements.
    row0 = i_b.to(tl.int64) * T * H + i_h
    p_q = q_ptr + row0 * K + offs_k
    p_k = k_ptr + row0 * K + offs_k
    p_g = g_ptr + row0 * K + offs_k
    p_v = v_ptr + row0 * V + offs_v
    p_o = o_ptr + row0 * V + offs_v
    p_beta = beta_ptr + row0

    state_offs = i_bh.to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]
    if HAS_INITIAL_STATE:
        S = tl.load(h0_ptr + state_offs, mask=mask_s, other=0.0).to(tl.float32)
    else:
        S = tl.zeros([BK, BLOCK_V], dtype=tl.float32)

    for _ in range(0, T):
        b_q = tl.load(p_q, mask=mask_k, other=0.0).to(tl.float32)
        b_k = tl.load(p_k, mask=mask_k, other=0.0).to(tl.float32)
        b_v = tl.load(p_v, mask=mask_v, other=0.0).to(tl.float32)
        b_g = tl.load(p_g, mask=mask_k, other=0.0).to(tl.float32)
        b_beta = tl.load(p_beta).to(tl.float32)

        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, axis=0) + EPS) * scale
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, axis=0) + EPS)
        gate = LOWER * tl.sigmoid(a * (b_g + bias))

        S = S * tl.exp(gate)[:, None]                          # decay first
        kS = tl.sum(b_k[:, None] * S, axis=0)                  # kᵀ S, [BLOCK_V]
        u = b_beta * (b_v - kS)                                # the delta
        S = S + b_k[:, None] * u[None, :]
        b_o = tl.sum(b_q[:, None] * S, axis=0)                 # reads the updated state
        tl.store(p_o, b_o.to(o_ptr.dtype.element_ty), mask=mask_v)

        p_q += H * K
        p_k += H * K
        p_g += H * K
        p_v += H * V
        p_o += H * V
        p_beta += H

    tl.store(ht_ptr + state_offs, S, mask=mask_s)


def entry(q, k, v, g_raw, beta, A_log, dt_bias, initial_state):
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = torch.empty((B, T, H, V), dtype=q.dtype, device=q.device)
    final_state = torch.empty((B, H, K, V), dtype=torch.float32, device=q.device)
    has_h0 = initial_state is not None
    block_v = min(BV, triton.next_power_of_2(V))
    grid = (triton.cdiv(V, block_v), B * H)
    kda_recurrent_kernel[grid](
        q, k, v, g_raw, beta, A_log, dt_bias, initial_state if has_h0 else final_state,
        o, final_state,
        T, H, K**-0.5,
        K=K, V=V, BK=triton.next_power_of_2(K), BLOCK_V=block_v,
        HAS_INITIAL_STATE=has_h0, LOWER=LOWER_BOUND, EPS=L2NORM_EPS,
        num_warps=NUM_WARPS,
    )
    return o, final_state.to(torch.bfloat16)
