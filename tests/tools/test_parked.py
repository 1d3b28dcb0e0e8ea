"""The process of the last profiled source, kept for its repeat profile (tools.judge.park).

It saves a repeat profile the spawn, the load and the JIT; it must never outlive a job that is not that
repeat, so that no candidate's process lives beside another's judgement.
"""

from __future__ import annotations

import pytest

from kernels import starter_path
from tools.pool import WorkerPool

STARTER = starter_path("softmax").read_text()
OTHER = STARTER + "\n# another source\n"


@pytest.fixture
def pool(tmp_path):
    with WorkerPool(gpus=[], root=tmp_path / "workers") as p:
        p.warm()
        yield p


def profile(pool: WorkerPool, source: str, **extra: object) -> dict:
    return pool.run({"op": "profile", "problem": "softmax", "shape": "small", "source": source, **extra},
                    timeout=240)


def test_a_repeat_profile_reuses_its_process_and_another_source_gets_a_fresh_one(pool: WorkerPool) -> None:
    first = profile(pool, STARTER)
    assert first["correct"] is True and first["candidate_process"] == "fresh"
    again = profile(pool, STARTER)
    assert again["correct"] is True and again["candidate_process"] == "reused"
    other = profile(pool, OTHER)
    assert other["correct"] is True and other["candidate_process"] == "fresh"
    # The first source's process was closed when the other ran: its next profile starts anew.
    assert profile(pool, STARTER)["candidate_process"] == "fresh"


def test_any_other_job_closes_the_kept_process(pool: WorkerPool) -> None:
    assert profile(pool, STARTER)["candidate_process"] == "fresh"
    pool.run({"op": "ping"}, timeout=60)  # a health check judges nothing: the process stays
    assert profile(pool, STARTER)["candidate_process"] == "reused"
    # A census of this very source is another job: the kept process is closed before it runs.
    pool.run({"op": "census", "problem": "softmax", "shape": "small", "source": STARTER}, timeout=60)
    assert profile(pool, STARTER)["candidate_process"] == "fresh"


def test_a_reused_process_is_judged_afresh(pool: WorkerPool) -> None:
    """State the candidate keeps across its profiles buys nothing: here, honest for its first profile's calls,
    then the last output returned; the repeat profile, in the same process, is caught."""
    src = STARTER.replace("def entry(", "_CALLS = []\n\n\ndef entry(", 1)
    src = src.replace("    return out\n", "    _CALLS.append(out)\n    return out\n", 1)
    src = src.replace("    rows, cols = x.shape\n", "    if len(_CALLS) >= 4:\n        return _CALLS[-1]\n"
                      "    rows, cols = x.shape\n", 1)
    first = profile(pool, src)
    assert first["correct"] is True, (first["error_class"], first["error"])
    again = profile(pool, src)
    assert again["candidate_process"] == "reused"
    assert again["correct"] is False and again["error_class"] in {"incorrect", "wrong_shape"}, again
