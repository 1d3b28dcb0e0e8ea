"""The generator that landed in kernels/kda/problem.py (2026-12-02) against this folder's emulation of the
recommended configuration: make_inputs equal bit for bit, and a timed rep's refill drawing correlated keys."""
from __future__ import annotations

import torch

import emu
from kernels import get_problem
from kernels.draws import ChainedDraws

KDA = get_problem("kda")

if __name__ == "__main__":
    for shape in ("small", "odd", "mid"):
        dims = dict(KDA.dims(shape))
        made = KDA.make_inputs(dims, 5, "cpu", torch.bfloat16)
        emulated = emu.make_inputs(dims, 5, alpha=2.0, conv=4, beta_mu=1.0)
        same = all((s is None and t is None) or torch.equal(s, t) for s, t in zip(made, emulated))
        buffers = [t.clone() if t is not None else None for t in made]
        KDA.refill_inputs(buffers, dims, ChainedDraws(7, None, "cpu"))
        k = buffers[1].float() / buffers[1].float().norm(dim=-1, keepdim=True)
        print(shape, "make_inputs == emu:", same, "| refill: beta mean", round(float(buffers[4].float().mean()), 3),
              "key cos lag 1", round(float((k[:, 1:] * k[:, :-1]).sum(-1).mean()), 3),
              "lag 40", round(float((k[:, 40:] * k[:, :-40]).sum(-1).mean()), 3))
