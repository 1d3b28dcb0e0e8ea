"""Timed reps chained through their outputs, on the CPU timed protocol (`cpu_timing`).

A batch's seeds arrive together, so a harness patched by its candidate could draw every rep's inputs at once and
serve the batch from one stacked call, reporting a share of it for each rep. Each rep's inputs are therefore drawn
from its seed and the key of the rep before it, a function of that rep's outputs (kernels.draws.ChainedDraws):
the patched batches below differ only in how they get their reps' inputs, and only the one that runs the reps in
order, each after the one before, is judged correct.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy
import pytest

from kernels import starter_path

STARTER = starter_path("softmax").read_text()
Profile = Callable[[str], dict[str, Any]]  # conftest.cpu_timed

# A batch of the harness's own steps, rewritten in the candidate's module: STACKED decides whether the reps' inputs
# are drawn up front (and served by one call over all their rows: softmax is row by row) or each from the one
# before; FORGE_KEYS whether the keys reported are the outputs' or the ones the inputs were drawn from.
PATCHED_BATCH = '''
import torch as _torch

_time = _torch.sys.modules["time"]

_Host = _torch.sys.modules["tools.candidate_host"].Host
_timing = _torch.sys.modules["tools.timing"]
_draws = _torch.sys.modules["kernels.draws"]
_problems = _torch.sys.modules["kernels"]
_batch = _Host.batch


def _own_batch(self, msg):
    seeds = [int(s) for s in msg.header.get("seeds", [])]
    if not seeds:
        return _batch(self, msg)
    problem = _problems.get_problem(self.rep_recipe[0])
    shape = self.rep_recipe[1]
    commits = _torch.zeros((len(seeds), 1, _timing.DIGEST_WORDS), dtype=_torch.int32)
    t0 = _time.perf_counter()
    if STACKED:
        rows = self.buffers[0].shape[0]
        stack = _torch.empty((len(seeds) * rows, self.buffers[0].shape[1]), dtype=self.buffers[0].dtype)
        for j, seed in enumerate(seeds):
            problem.refill(self.buffers, shape, seed)  # no key: all of the batch's inputs before any output
            stack[j * rows:(j + 1) * rows].copy_(self.buffers[0])
        outs = self.entry(stack).split(rows)
    else:
        outs = []
        for j, seed in enumerate(seeds):
            problem.refill(self.buffers, shape, seed, commits[j - 1] if j else None)
            outs.append(self.entry(*self.buffers))
            _timing.commit_outputs((outs[-1],), commits[j], gpu=False)
    share_us = (_time.perf_counter() - t0) * 1e6 / len(seeds)
    for j, out in enumerate(outs):
        out = out.contiguous()
        if STACKED:
            _timing.commit_outputs((out,), commits[j], gpu=False)
        self._stash_slot(j, (out,))
    read = _timing.sealed(commits)
    keys = read.keys
    if FORGE_KEYS:  # each key as the one the next rep's inputs were drawn from: none
        keys = [_draws.key_hex(_torch.zeros((1, _draws.KEY_WORDS), dtype=_torch.int32))] * len(seeds)
    return {"ok": True, "us": [share_us] * len(seeds), "commits": read.digests, "keys": keys}


_Host.batch = _own_batch
'''


def _patched(stacked: bool, forge_keys: bool) -> str:
    return f"STACKED = {stacked}\nFORGE_KEYS = {forge_keys}\n" + PATCHED_BATCH + STARTER


def test_reps_run_in_order_through_the_patched_batch_are_judged_correct(cpu_timed: Profile) -> None:
    """The control: the rewritten batch is faithful when it chains its reps, so what refuses the others is the
    chain, not the rewrite."""
    r = cpu_timed(_patched(stacked=False, forge_keys=False))
    assert r["correct"] is True, (r["error_class"], r["error"])
    assert r["verification"]["bounds"]["checked_reps"] == r["timing"]["reps"] == 30


def test_reps_drawn_up_front_and_served_by_one_call_are_wrong_where_checked(cpu_timed: Profile) -> None:
    r = cpu_timed(_patched(stacked=True, forge_keys=False))
    assert r["correct"] is False and r["error_class"] == "incorrect", (r["error_class"], r["error"])
    assert "timed rep 1 " not in r["error"]  # a batch's first rep has no key: it is right, the second is not


def test_keys_made_up_before_the_outputs_existed_are_refused(cpu_timed: Profile) -> None:
    r = cpu_timed(_patched(stacked=True, forge_keys=True))
    assert r["correct"] is False and r["error_class"] == "timing_mismatch", (r["error_class"], r["error"])
    assert "key" in r["error"]


@pytest.mark.skipif(tuple(int(p) for p in numpy.__version__.split(".")[:2]) >= (2, 3),
                    reason="the Triton interpreter's runtime loop bounds need numpy < 2.3 (pyproject.toml pins it; "
                           "a machine outside the pins, as the GPU one is, runs the fill compiled instead)")
def test_the_gpus_keyed_fill_chains_the_reps_end_to_end(tmp_path: Any, monkeypatch: Any) -> None:
    """The same protocol with every chained draw through the Philox fill a GPU runs (in the interpreter here): the
    candidate's process and the judge draw the same bits from the digest rows and the reported key alike."""
    from kernels.draws import TRITON_DRAWS_ENV
    from tools.pool import WorkerPool

    monkeypatch.setenv(TRITON_DRAWS_ENV, "1")
    with WorkerPool(gpus=[], root=tmp_path / "pool") as pool:
        def profile(source: str) -> dict[str, Any]:
            return pool.run({"op": "profile", "problem": "softmax", "shape": "small", "source": source,
                             "cpu_timing": True, "budget_s": 0.05}, timeout=240)

        # The candidate's process must see the switch (the judge's then too: a judge on the other path would draw
        # other inputs, and the honest kernel would be wrong).
        tripwire = (f"\nif torch.sys.modules['os'].environ.get({TRITON_DRAWS_ENV!r}) != '1':\n"
                    "    raise RuntimeError('the candidate process draws on the generator path')\n")
        honest = profile(STARTER + tripwire)
        assert honest.get("correct") is True, honest
        assert honest["verification"]["bounds"]["checked_reps"] == honest["timing"]["reps"] == 30
        stacked = profile(_patched(stacked=True, forge_keys=False))
        assert stacked["correct"] is False and stacked["error_class"] == "incorrect", stacked["error"]
