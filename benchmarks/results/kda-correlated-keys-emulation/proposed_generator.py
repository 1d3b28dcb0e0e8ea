"""Proposed KDA generator: correlated keys and higher betas (landed in kernels/kda/problem.py, 2026-12-02).

Differences from today's make_inputs (everything else is drawn identically, in the same order):
- k: the N(0, 1) noise goes through a causal box filter of KEY_CONV = 4 tokens (Kimi Linear's ShortConv width),
  scaled back to unit variance, plus KEY_SHARED = 2 times one N(0, I) direction per (batch, head) shared by every
  token; the slow channels are then scaled by SLOW_KEY_SCALE as today. Cosine of two keys of one head: 0.8 far
  apart, 0.95 / 0.90 / 0.85 at lags 1 / 2 / 3.
- beta = sigmoid(N(BETA_MU = 1, 1)) (median 0.73, today 0.5).
"""
from __future__ import annotations

import math

import torch

from kernels.kda.problem import SLOW_FRACTION, SLOW_G_MAX, SLOW_G_MIN, SLOW_KEY_SCALE
from kernels.draws import ChainedDraws, Draws
from kernels.spec import Dims, Inputs

KEY_CONV = 4      # taps of the causal box filter over the key noise
KEY_SHARED = 2.0  # weight of the per-(batch, head) shared key direction (cosine 4/5 between any two keys)
BETA_MU = 1.0     # beta = sigmoid(N(BETA_MU, 1))


def _keys(noise: torch.Tensor, history: torch.Tensor, shared: torch.Tensor, slow: torch.Tensor) -> torch.Tensor:
    """noise [B, T, H, K], history [B, KEY_CONV - 1, H, K], shared [B, 1, H, K] (all N(0, 1)), slow [H, K] bool."""
    T = noise.shape[1]
    e = torch.cat([history, noise], dim=1)
    k = e[:, :T].clone()
    for j in range(1, KEY_CONV):  # KEY_CONV - 1 shifted adds: no loop over tokens
        k += e[:, j: j + T]
    k = k / math.sqrt(KEY_CONV) + KEY_SHARED * shared
    return torch.where(slow, k * SLOW_KEY_SCALE, k)


def make_inputs(dims: Dims, seed: int, device: str, dtype: torch.dtype | None) -> Inputs:
    dtype = dtype or torch.bfloat16
    B, T, H, K, V = (int(dims[n]) for n in ("B", "T", "H", "K", "V"))
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32)

    q = randn(B, T, H, K).to(dtype)
    k = randn(B, T, H, K)
    v = randn(B, T, H, V).to(dtype)
    g_raw = randn(B, T, H, K)
    beta = torch.sigmoid(randn(B, T, H) + BETA_MU).to(dtype)
    A_log = torch.empty(H, device=device, dtype=torch.float32).uniform_(1.0, 16.0, generator=gen).log()
    dt_bias = randn(H, K) * 0.5
    rank = torch.rand(H, K, generator=gen, device=device).argsort(dim=-1).argsort(dim=-1)
    slow = rank < max(1, round(SLOW_FRACTION * K))
    u = torch.rand(H, K, generator=gen, device=device)
    gamma = torch.exp(math.log(SLOW_G_MIN) + (math.log(SLOW_G_MAX) - math.log(SLOW_G_MIN)) * u)
    a = A_log.exp().view(H, 1)
    x_median = torch.log(gamma / 5.0) - torch.log1p(-gamma / 5.0)
    dt_bias = torch.where(slow, x_median / a, dt_bias).reshape(H * K)
    g_raw = torch.where(slow, g_raw / a, g_raw).to(dtype)
    initial_state = randn(B, H, K, V) if dims.get("init", 0) else None
    # Drawn last, so that every other input is today's, bit for bit.
    k = _keys(k, randn(B, KEY_CONV - 1, H, K), randn(B, 1, H, K), slow).to(dtype)
    return q, k, v, g_raw, beta, A_log, dt_bias, initial_state


def refill_inputs(buffers: list, dims: Dims, draws: Draws) -> None:
    """A timed rep's inputs in place, from the rep's draws (kernels.draws: its seed and the previous rep's key): the
    same distribution as make_inputs (other values), ~30 device ops, none per token. A_log and dt_bias are drawn anew too: the slow channels (and so k's and g_raw's scales) follow
    from them, and they are not recoverable from dt_bias alone."""
    q, k, v, g_raw, beta, A_log, dt_bias, initial_state = buffers
    B, T, H, K = k.shape
    dev = k.device
    f32 = torch.float32
    draws.normal_(q)
    draws.normal_(v)
    beta.copy_(torch.sigmoid(draws.normal_(torch.empty(B, T, H, device=dev, dtype=f32)) + BETA_MU))
    draws.uniform_(A_log, 1.0, 16.0).log_()
    rank = draws.uniform_(torch.empty(H, K, device=dev)).argsort(dim=-1).argsort(dim=-1)
    slow = rank < max(1, round(SLOW_FRACTION * K))
    u = draws.uniform_(torch.empty(H, K, device=dev))
    gamma = torch.exp(math.log(SLOW_G_MIN) + (math.log(SLOW_G_MAX) - math.log(SLOW_G_MIN)) * u)
    a = A_log.exp().view(H, 1)
    x_median = torch.log(gamma / 5.0) - torch.log1p(-gamma / 5.0)
    fast_bias = draws.normal_(torch.empty(H, K, device=dev, dtype=f32)) * 0.5
    dt_bias.copy_(torch.where(slow, x_median / a, fast_bias).reshape(H * K))
    g = draws.normal_(torch.empty(B, T, H, K, device=dev, dtype=f32))
    g_raw.copy_(torch.where(slow, g / a, g))
    noise = draws.normal_(torch.empty(B, T, H, K, device=dev, dtype=f32))
    history = draws.normal_(torch.empty(B, KEY_CONV - 1, H, K, device=dev, dtype=f32))
    shared = draws.normal_(torch.empty(B, 1, H, K, device=dev, dtype=f32))
    k.copy_(_keys(noise, history, shared, slow))
    if initial_state is not None:
        draws.normal_(initial_state)


if __name__ == "__main__":  # check: equals emu.make_inputs(alpha=2, conv=4, beta_mu=1) bit for bit; refill runs
    import sys
    sys.path.insert(0, "/tmp/kda_inputs")
    import emu
    from kernels import get_problem
    KDA = get_problem("kda")
    for sh in ("small", "odd", "mid"):
        d = dict(KDA.dims(sh))
        x = make_inputs(d, 5, "cpu", torch.bfloat16)
        y = emu.make_inputs(d, 5, alpha=2.0, conv=4, beta_mu=1.0)
        same = all((s is None and t is None) or torch.equal(s, t) for s, t in zip(x, y))
        bufs = [t.clone() if t is not None else None for t in x]
        refill_inputs(bufs, d, ChainedDraws(7, None, "cpu"))
        kk = bufs[1].float() / bufs[1].float().norm(dim=-1, keepdim=True)
        cos = float((kk[:, 1:] * kk[:, :-1]).sum(-1).mean())
        cos_far = float((kk[:, 40:] * kk[:, :-40]).sum(-1).mean())
        print(sh, "make_inputs == emu:", same, "| refill: beta mean", round(float(bufs[4].float().mean()), 3),
              "key cos lag1", round(cos, 3), "lag40", round(cos_far, 3))
