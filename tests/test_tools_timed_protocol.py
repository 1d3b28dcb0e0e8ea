"""The timed protocol, run on the CPU: rotated inputs, reps checked after they ran, the bracket around batches.

Under the interpreter the judge can run its timed reps by the wall clock (`cpu_timing`), which measures no kernel
but exercises every step a GPU profile takes between the judge and the candidate's process, so the cheats
that target that protocol are caught here in CI, not only on an H200.
"""

from __future__ import annotations

import pytest

from kernels import starter_path
from tools.pool import WorkerPool

STARTER = starter_path("softmax").read_text()
RETURN = "    return out\n"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory):
    with WorkerPool(gpus=[], root=tmp_path_factory.mktemp("workers")) as p:
        p.warm()
        yield p


def timed(pool: WorkerPool, source: str) -> dict:
    return pool.run({"op": "profile", "problem": "softmax", "shape": "small", "source": source,
                     "cpu_timing": True, "budget_s": 0.05}, timeout=240)


def test_an_honest_kernel_is_timed_with_every_rep_checked(pool: WorkerPool) -> None:
    r = timed(pool, STARTER)
    assert r["correct"] is True and r["verified"] is False, (r["error_class"], r["error"])  # never verified on a CPU
    assert r["timing"]["mode"] == "cpu_wall_clock" and r["timing"]["reps"] == 30
    bounds = r["verification"]["bounds"]
    assert bounds["bracket"]["ok"] and bounds["checked_reps"] == r["timing"]["reps"]


def test_honest_until_the_timed_reps_then_cached_is_caught_at_a_timed_rep(pool: WorkerPool) -> None:
    """Honest for the checks (and the warm-up), then it returns its last output: a rep with new inputs shows it."""
    src = STARTER.replace("def entry(", "_SEEN = []\n\n\ndef entry(", 1)
    src = src.replace(RETURN, "    _SEEN.append(out)\n    return out\n", 1)
    src = src.replace("    rows, cols = x.shape\n", "    if len(_SEEN) >= 7:\n        return _SEEN[-1]\n"
                      "    rows, cols = x.shape\n", 1)
    assert src.count("_SEEN") == 4
    r = timed(pool, src)
    assert r["correct"] is False and r["error_class"] == "incorrect", r
    assert "timed rep" in r["error"]


PATCH_EVENTS = '''
import torch as _torch

_host = _torch.sys.modules["tools.candidate_host"]
_elapsed = _host.WallEvent.elapsed_time
_host.WallEvent.elapsed_time = lambda self, end: _elapsed(self, end) / 100
'''


def test_samples_patched_to_a_hundredth_are_refused_by_the_bracket(pool: WorkerPool) -> None:
    r = timed(pool, PATCH_EVENTS + STARTER)
    assert r["correct"] is False and r["error_class"] == "timing_mismatch", r


PATCH_MEDIAN = '''
import torch as _torch

_Host = _torch.sys.modules["tools.candidate_host"].Host
_batch = _Host.batch


def _forged(self, msg):
    answer = _batch(self, msg)
    us = answer.get("us") or []
    if len(us) > 2:
        half, total = len(us) // 2 + 1, sum(us)
        low = min(us) / 10
        us = [low] * half + [(total - low * half) / (len(us) - half)] * (len(us) - half)
        answer["us"] = us
    return answer


_Host.batch = _forged
'''


def test_a_median_pushed_down_while_the_sum_fits_the_wall_is_refused(pool: WorkerPool) -> None:
    """The samples' sum still accounts for each batch's wall; their median, which is what gets reported, does
    not describe the reps that ran."""
    r = timed(pool, PATCH_MEDIAN + STARTER)
    assert r["correct"] is False and r["error_class"] == "timing_mismatch", r
    assert "median" in r["error"]
