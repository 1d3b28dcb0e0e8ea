"""Reference implementations of Kimi Delta Attention (KDA), forward, in plain torch.

Two forms of one computation (DESIGN.md §9), per batch b and head h, state S of shape K x V:

    g_t = -5 * sigmoid(exp(A_log[h]) * (g_raw_t + dt_bias[h]))          per channel, in (-5, 0)
    S_t = (I - beta_t k_t k_tᵀ) Diag(exp(g_t)) S_{t-1} + beta_t k_t v_tᵀ
    o_t = S_tᵀ (scale * q_t),  scale = K^-0.5,  q and k L2-normalised per head vector

- `recurrent_reference`: the recurrence step by step: the correctness reference.
- `chunked_reference`: the chunk-parallel form a fast kernel uses (chunks of 64, UT transform,
  inter-chunk state passing), with the cumulative gate re-centred per sub-block of 16 so that no
  exp() leaves float32 range even when every gate sits at the -5 bound.

Both take FLA's layout [B, T, H, K] and compute in float32 (or float64 on request).
"""

from __future__ import annotations

import torch

LOWER_BOUND = -5.0  # the gate's lower bound: every log-decay g is in (LOWER_BOUND, 0)
L2NORM_EPS = 1e-6  # as FLA's l2norm: x / sqrt(sum(x^2) + eps)
CHUNK = 64
SUB_CHUNK = 16


def kda_gate(
    g_raw: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    lower_bound: float = LOWER_BOUND,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Per-channel log-space decay g = lower_bound * sigmoid(exp(A_log[h]) * (g_raw + dt_bias[h, :])).

    g_raw is [..., H, K]; A_log is [H]; dt_bias is [H * K] (FLA's shapes). Returns g in `dtype`.
    """
    H, K = g_raw.shape[-2:]
    x = g_raw.to(dtype) + dt_bias.to(dtype).view(H, K)
    return lower_bound * torch.sigmoid(A_log.to(dtype).exp().view(H, 1) * x)


def l2norm(x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Normalise the last dimension to unit length (FLA's eps convention)."""
    x = x.to(dtype)
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


def kda_recurrence(
    q_hat: torch.Tensor,
    k_hat: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence on prepared inputs, all in one float dtype.

    q_hat (already scaled) and k_hat are [B, T, H, K], v [B, T, H, V], g [B, T, H, K], beta [B, T, H].
    Vectorised over B and H with a loop over T: four batched ops a step, the state updated in place.
    """
    B, T, H, K = k_hat.shape
    V = v.shape[-1]
    dtype = k_hat.dtype
    BH = B * H

    def steps_first(x: torch.Tensor, *tail: int) -> torch.Tensor:
        # [B, T, H, ...] -> [T, B*H, *tail], contiguous so each step is one cheap slice.
        return x.transpose(0, 1).reshape(T, BH, *tail).contiguous()

    decay = steps_first(g.exp(), K, 1)
    k_col = steps_first(k_hat, K, 1)
    neg_beta_k = steps_first(-beta.unsqueeze(-1) * k_hat, 1, K)
    beta_v = steps_first(beta.unsqueeze(-1) * v, 1, V)
    q_row = steps_first(q_hat, 1, K)

    if initial_state is None:
        S = torch.zeros(BH, K, V, dtype=dtype, device=k_hat.device)
    else:
        S = initial_state.to(dtype).reshape(BH, K, V).clone()
    o = torch.empty(T, BH, 1, V, dtype=dtype, device=k_hat.device)
    for t in range(T):
        S.mul_(decay[t])                                    # decay first
        u = torch.baddbmm(beta_v[t], neg_beta_k[t], S)      # beta (v - kᵀ S): the delta
        S.baddbmm_(k_col[t], u)                             # S += k uᵀ
        torch.bmm(q_row[t], S, out=o[t])                    # the output reads the updated state
    o = o.view(T, B, H, V).transpose(0, 1).contiguous()
    return o, S.view(B, H, K, V)


def recurrent_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g_raw: torch.Tensor,
    beta: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KDA forward, step by step. Returns (o [B, T, H, V], final_state [B, H, K, V]) in `dtype`."""
    K = q.shape[-1]
    q_hat = l2norm(q, dtype) * K**-0.5
    k_hat = l2norm(k, dtype)
    g = kda_gate(g_raw, A_log, dt_bias, dtype=dtype)
    return kda_recurrence(q_hat, k_hat, v.to(dtype), g, beta.to(dtype), initial_state)


def _to_chunks(x: torch.Tensor, n_chunks: int, chunk: int) -> torch.Tensor:
    """[B, T, H, ...] (T padded to n_chunks * chunk) -> [B, H, N, C, ...]."""
    B, T, H = x.shape[:3]
    pad = n_chunks * chunk - T
    if pad:
        x = torch.cat([x, x.new_zeros(B, pad, H, *x.shape[3:])], dim=1)
    x = x.view(B, n_chunks, chunk, H, *x.shape[3:])
    return x.movedim(3, 1)


def intra_chunk_scores(
    q_hat: torch.Tensor, k_hat: torch.Tensor, G: torch.Tensor, sub_chunk: int = SUB_CHUNK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairwise decayed scores inside each chunk, through matmuls of re-centred factors.

    q_hat, k_hat, G: [..., C, K], G the cumulative log-gate from the chunk start. Returns the full
    C x C products qk[i, j] = Σ_d q_id k_jd exp(G_id - G_jd) and kk[i, j] (same with k for q), valid
    (before masking) for j < the end of i's sub-block; the caller masks the causal part.

    exp(G_i - G_j) is split as exp(G_i - c) * exp(c - G_j) with c the cumulative gate at the first
    row of i's sub-block (length `sub_chunk`). For j in an earlier sub-block both factors are <= 1;
    inside the diagonal sub-block exp(c - G_j) <= exp(5 * (sub_chunk - 1)) = e^75 at the -5 bound,
    inside float32's e^88.7. The centre is never later than row i, so no future gate enters a
    causal score, not even through rounding. With sub_chunk = C (the centre at the chunk's start)
    the column factor reaches e^(5 * 63) and overflows: the naive form, kept for the tests.
    """
    *lead, C, K = G.shape
    ns = C // sub_chunk
    G_sub = G.view(*lead, ns, sub_chunk, K)
    centre = G_sub[..., :1, :]                                       # [..., ns, 1, K]
    row = torch.exp(G_sub - centre)                                  # <= 1
    col_exp = centre - G.unsqueeze(-3)                               # [..., ns, C, K]
    # Columns after i's sub-block are masked later; zero them here so no inf is ever formed.
    pos = torch.arange(C, device=G.device)
    sub_end = (torch.arange(ns, device=G.device) + 1) * sub_chunk
    keep = (pos.view(1, C) < sub_end.view(ns, 1)).view(ns, C, 1)
    col = torch.where(keep, torch.exp(torch.where(keep, col_exp, 0.0)), 0.0)
    k_col = k_hat.unsqueeze(-3) * col                                # [..., ns, C, K]
    q_row = (q_hat.view(*lead, ns, sub_chunk, K) * row)
    k_row = (k_hat.view(*lead, ns, sub_chunk, K) * row)
    qk = (q_row @ k_col.transpose(-1, -2)).reshape(*lead, C, C)
    kk = (k_row @ k_col.transpose(-1, -2)).reshape(*lead, C, C)
    return qk, kk


def chunked_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g_raw: torch.Tensor,
    beta: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    chunk: int = CHUNK,
    sub_chunk: int = SUB_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KDA forward in the chunked (WY / UT-transform) form. Same outputs as `recurrent_reference`.

    Per chunk of C tokens, G the within-chunk cumulative gate (G_i = Σ_{s<=i} g_s):
      Akk[i, j] = beta_i Σ_d k_id k_jd e^(G_id - G_jd) (i > j);  Aqk[i, j] = same with scale*q (i >= j)
      (I + Akk) [W | U] = Diag(beta) [K ⊙ e^G | V]        (the UT transform, a unit-lower solve)
      V' = U - W S;  O = (Q ⊙ e^G) S + Aqk V';  S <- Diag(e^(G_last)) S + (K ⊙ e^(G_last - G))ᵀ V'
    Every exponent is <= 0 except inside `intra_chunk_scores`, which re-centres per sub-block.
    T is padded to a multiple of C with k = 0, g = 0, beta = 0: the padding leaves S unchanged.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    if chunk % sub_chunk:
        raise ValueError(f"sub_chunk {sub_chunk} must divide chunk {chunk}")
    N = -(-T // chunk)
    q_hat = _to_chunks(l2norm(q, dtype) * K**-0.5, N, chunk)          # [B, H, N, C, K]
    k_hat = _to_chunks(l2norm(k, dtype), N, chunk)
    vc = _to_chunks(v.to(dtype), N, chunk)                            # [B, H, N, C, V]
    bc = _to_chunks(beta.to(dtype), N, chunk).unsqueeze(-1)           # [B, H, N, C, 1]
    G = _to_chunks(kda_gate(g_raw, A_log, dt_bias, dtype=dtype), N, chunk).cumsum(-2)
    G_last = G[..., -1:, :]                                           # [B, H, N, 1, K]

    qk, kk = intra_chunk_scores(q_hat, k_hat, G, sub_chunk)
    idx = torch.arange(chunk, device=q.device)
    causal = idx.view(-1, 1) >= idx.view(1, -1)
    A_qk = torch.where(causal, qk, 0.0)
    A_kk = torch.where(causal & ~torch.eye(chunk, dtype=torch.bool, device=q.device), kk, 0.0) * bc
    unit_lower = A_kk + torch.eye(chunk, dtype=dtype, device=q.device)
    rhs = torch.cat([bc * k_hat * G.exp(), bc * vc], dim=-1)
    WU = torch.linalg.solve_triangular(unit_lower, rhs, upper=False, unitriangular=True)
    W, U = WU[..., :K], WU[..., K:]
    q_dec = q_hat * G.exp()                                           # reads S from the chunk start
    k_dec = (k_hat * (G_last - G).exp()).transpose(-1, -2)            # [B, H, N, K, C]
    state_decay = G_last.transpose(-1, -2).exp()                      # [B, H, N, K, 1]

    if initial_state is None:
        S = torch.zeros(B, H, K, V, dtype=dtype, device=q.device)
    else:
        S = initial_state.to(dtype).clone()
    o = torch.empty(B, H, N, chunk, V, dtype=dtype, device=q.device)
    for n in range(N):
        v_new = U[:, :, n] - W[:, :, n] @ S
        o[:, :, n] = q_dec[:, :, n] @ S + A_qk[:, :, n] @ v_new
        S = state_decay[:, :, n] * S + k_dec[:, :, n] @ v_new
    o = o.view(B, H, N * chunk, V)[:, :, :T].transpose(1, 2).contiguous()
    return o, S
