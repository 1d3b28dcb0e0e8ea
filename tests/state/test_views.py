"""Derived views on a small hand-made log: attempts, best, failures, notes, runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from state import EventLog
from state.events import ATTEMPT, NOTE, RUN_END, RUN_START


def _a(log: EventLog, run: str, problem: str, shape: str, outcome: str, median: float | None = None,
       error_class: str | None = None, device: str = "H200", src: str = "k", tool: str = "profile",
       verified: bool | None = True) -> int:
    """An attempt as the judge logs it (verified), or unverified (False), or as logged before the field (None)."""
    sha = log.put_source(src)
    payload: dict[str, Any] = dict(problem=problem, shape=shape, source_sha=sha, tool=tool, outcome=outcome,
                                   device=device, median_us=median, error_class=error_class)
    if verified is not None:
        payload["verified"] = verified
        payload["verification"] = "judge:v1+bounds" if verified else None
    return log.append(ATTEMPT, payload, run_id=run).id


@pytest.fixture
def log() -> Iterator[EventLog]:
    log = EventLog()
    log.append(RUN_START, {"goal": "g1"}, run_id="r1")
    ids = {
        "slow": _a(log, "r1", "mla", "bench", "correct", 30.0, src="slow"),
        "fast": _a(log, "r1", "mla", "bench", "correct", 20.0, src="fast"),
        "wrong": _a(log, "r1", "mla", "bench", "incorrect", 5.0, "mismatch"),
        "ce1": _a(log, "r1", "mla", "bench", "compile_error", None, "syntax"),
        "small": _a(log, "r1", "mla", "small", "correct", 1.0, src="small"),
    }
    log.append(NOTE, {"text": "split-KV helps", "problem": "mla", "tags": ["idea"]}, run_id="r1")
    log.append(RUN_END, {"state": "stopped", "reason": "test"}, run_id="r1")
    log.append(RUN_START, {"goal": "g2"}, run_id="r2")
    ids |= {
        "tie": _a(log, "r2", "mla", "bench", "correct", 20.0, src="tie"),
        "cpu": _a(log, "r2", "mla", "bench", "correct", 10.0, device="cpu", src="cpu"),
        "ce2": _a(log, "r2", "mla", "bench", "compile_error", None, "syntax"),
        "to": _a(log, "r2", "kda", "bench", "timeout", None, None),
        "comp": _a(log, "r2", "kda", "bench", "compiled", None, None, tool="compile"),
        "untimed_old": _a(log, "r2", "kda", "small", "correct", None, src="u1"),
        "untimed_new": _a(log, "r2", "kda", "small", "correct", None, src="u2"),
    }
    log.append(NOTE, {"text": "kda note", "problem": "kda", "shape": "bench"}, run_id="r2")
    log.append(NOTE, {"text": "global note"})
    log.ids = ids  # type: ignore[attr-defined]
    yield log
    log.close()


def test_attempts_filters_and_paging(log: EventLog) -> None:
    ids = log.ids  # type: ignore[attr-defined]
    everything = log.attempts(limit=None)
    assert [a["id"] for a in everything] == sorted(ids.values(), reverse=True)
    assert len(log.attempts()) == len(ids)
    mla_bench = [a["id"] for a in log.attempts(problem="mla", shape="bench")]
    assert mla_bench == sorted(
        [ids[k] for k in ("slow", "fast", "wrong", "ce1", "tie", "cpu", "ce2")], reverse=True
    )
    assert [a["id"] for a in log.attempts(problem="mla", shape="bench", limit=3, offset=2)] == mla_bench[2:5]
    assert [a["id"] for a in log.attempts(outcome="compile_error")] == [ids["ce2"], ids["ce1"]]
    assert [a["id"] for a in log.attempts(run_id="r1", shape="small")] == [ids["small"]]
    a = log.attempts(problem="kda", outcome="timeout")[0]
    assert a["run_id"] == "r2" and a["ts"] > 0 and a["error"] is None and a["speedup"] is None
    assert a["tool"] == "profile" and a["device"] == "H200"


def test_best(log: EventLog) -> None:
    ids = log.ids  # type: ignore[attr-defined]
    best = log.best("mla", "bench")
    assert best is not None and best["id"] == ids["cpu"] and best["source"] == "cpu"
    on_h200 = log.best("mla", "bench", device="H200")
    # "fast" and "tie" are both 20 us: the earlier one wins; the faster incorrect one never does.
    assert on_h200 is not None and on_h200["id"] == ids["fast"] and on_h200["source"] == "fast"
    assert on_h200["median_us"] == 20.0
    small = log.best("kda", "small")
    assert small is not None and small["id"] == ids["untimed_new"] and small["source"] == "u2"
    assert log.best("kda", "bench") is None
    assert log.best("mla", "bench", device="B200") is None
    assert log.best("nope", "bench") is None
    by_pair = {(b["problem"], b["shape"]): b["id"] for b in log.best_all()}
    assert by_pair == {("mla", "bench"): ids["cpu"], ("mla", "small"): ids["small"],
                       ("kda", "small"): ids["untimed_new"]}


def test_best_prefers_timed_over_newer_untimed(log: EventLog) -> None:
    _a(log, "r2", "mla", "small", "correct", None, src="later-untimed")
    best = log.best("mla", "small")
    assert best is not None and best["source"] == "small"


def test_failures_by_class(log: EventLog) -> None:
    assert log.failures_by_class() == {"syntax": 2, "mismatch": 1, "timeout": 1}
    assert list(log.failures_by_class()) == ["syntax", "mismatch", "timeout"]
    assert log.failures_by_class(problem="kda") == {"timeout": 1}
    assert log.failures_by_class(run_id="r1") == {"mismatch": 1, "syntax": 1}
    assert log.failures_by_class(problem="mla", run_id="r2") == {"syntax": 1}
    assert log.failures_by_class(problem="none") == {}


def test_notes(log: EventLog) -> None:
    notes = log.notes()
    assert [n["text"] for n in notes] == ["global note", "kda note", "split-KV helps"]
    assert notes[0]["run_id"] is None and notes[0]["tags"] == [] and notes[0]["problem"] is None
    assert [n["text"] for n in log.notes(problem="mla")] == ["split-KV helps"]
    assert log.notes(problem="mla")[0]["tags"] == ["idea"]
    assert [n["text"] for n in log.notes(run_id="r2")] == ["kda note"]
    assert [n["text"] for n in log.notes(limit=1)] == ["global note"]


def test_runs(log: EventLog) -> None:
    runs = log.runs()
    assert [r["run_id"] for r in runs] == ["r2", "r1"]
    r1 = runs[1]
    evs = log.events(run_id="r1")
    assert r1["events"] == len(evs) == 8
    assert (r1["first_id"], r1["last_id"]) == (evs[0].id, evs[-1].id)
    assert (r1["first_ts"], r1["last_ts"]) == (evs[0].ts, evs[-1].ts)
    assert r1["last_kind"] == RUN_END and r1["goal"] == "g1" and r1["end_state"] == "stopped"
    assert runs[0]["last_kind"] == NOTE and runs[0]["goal"] == "g2" and runs[0]["end_state"] is None


def test_views_survive_rebuild_and_are_plain_sql(log: EventLog) -> None:
    def snapshot() -> tuple[object, ...]:
        return (log.attempts(limit=None), log.best("mla", "bench"), log.failures_by_class(), log.notes())

    before = snapshot()
    log.rebuild_views()
    assert snapshot() == before
    conn = log._c()
    assert conn.execute("SELECT COUNT(*) FROM attempts WHERE problem = 'mla'").fetchone()[0] == 8
    plan = " ".join(
        str(r) for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM attempts WHERE problem = ? AND shape = ? ORDER BY id DESC",
            ("mla", "bench"),
        )
    )
    assert "attempts_by_problem" in plan


def test_changed_view_definition_is_rebuilt_on_open(log: EventLog) -> None:
    conn = log._c()
    conn.execute("DROP VIEW failures")
    conn.execute("CREATE VIEW failures AS SELECT 1 AS error_class")
    log.close()
    with EventLog(log.path) as again:
        assert again.failures_by_class() == {"syntax": 2, "mismatch": 1, "timeout": 1}
