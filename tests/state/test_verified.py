"""Verified attempts: only what the judge vouched for is best; attempts logged before `verified` existed
stay in the log, marked unverified by the views (the events themselves are never rewritten)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from state import EventLog
from state.events import ATTEMPT, ATTEMPT_OPTIONAL, validate
from state.schema import migrate

# The derived views as the release before `verified` wrote them, by hand (not taken from DERIVED).
OLD_VIEWS = [
    "CREATE VIEW attempts AS SELECT id, ts, run_id, json_extract(payload, '$.problem') AS problem, "
    "json_extract(payload, '$.shape') AS shape, json_extract(payload, '$.outcome') AS outcome, "
    "json_extract(payload, '$.error_class') AS error_class, json_extract(payload, '$.median_us') AS median_us, "
    "json_extract(payload, '$.speedup') AS speedup, json_extract(payload, '$.device') AS device, "
    "json_extract(payload, '$.source_sha') AS source_sha, json_extract(payload, '$.tool') AS tool, payload "
    "FROM events WHERE kind = 'attempt'",
    "CREATE VIEW best_attempts AS SELECT * FROM (SELECT a.*, ROW_NUMBER() OVER (PARTITION BY problem, shape "
    "ORDER BY CASE WHEN typeof(median_us) IN ('integer', 'real') THEN 0 ELSE 1 END, "
    "CASE WHEN typeof(median_us) IN ('integer', 'real') THEN median_us END, "
    "CASE WHEN typeof(median_us) IN ('integer', 'real') THEN id ELSE -id END) AS rank "
    "FROM attempts a WHERE outcome = 'correct') WHERE rank = 1",
]
JUDGED = {"verified": True, "verification": "judge:v1+bounds"}


def _attempt(sha: str, median: float | None, **extra: Any) -> dict[str, Any]:
    return {"problem": "mla", "shape": "bench", "source_sha": sha, "tool": "profile", "outcome": "correct",
            "device": "NVIDIA H200", "median_us": median, "speedup": None if median is None else 100.0 / median,
            **extra}


def _old_database(path: Path) -> None:
    """A log written by the release before `verified`: its tables, its views, an attempt without the field."""
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, path)
    for sql in OLD_VIEWS:
        conn.execute(sql)
    conn.execute("INSERT INTO sources VALUES ('s-old', 'old kernel', 1.0)")
    conn.execute("INSERT INTO events (ts, run_id, kind, payload) VALUES (1.0, 'old-run', 'attempt', ?)",
                 (json.dumps(_attempt("s-old", 1.0)),))
    conn.close()


def test_an_old_database_gets_new_views_and_its_attempts_are_unverified_and_never_best(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_database(path)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT * FROM best_attempts").fetchall()  # the old view calls it best
    conn.close()

    with EventLog(path) as log:
        (old,) = log.attempts()
        assert old["id"] == 1 and old["verified"] is False and old["verification"] is None
        assert log.best("mla", "bench") is None and log.best_all() == []
        assert log.best("mla", "bench", run_id="old-run") is None
        assert log.best("mla", "bench", include_unverified=True)["source"] == "old kernel"  # type: ignore[index]
        # a new, slower, verified attempt is the best; the old 1 us one never is
        sha = log.put_source("new kernel")
        new = log.append(ATTEMPT, _attempt(sha, 50.0, **JUDGED), run_id="new-run")
        best = log.best("mla", "bench")
        assert best is not None and best["id"] == new.id and best["verification"] == "judge:v1+bounds"
        assert [b["id"] for b in log.best_all()] == [new.id]
        columns = [r[1] for r in log._c().execute("PRAGMA table_info(attempts)")]
        assert {"verified", "verification"} <= set(columns)
    conn = sqlite3.connect(path)
    payload = json.loads(conn.execute("SELECT payload FROM events WHERE id = 1").fetchone()[0])
    conn.close()
    assert "verified" not in payload  # marked by the views, not by rewriting the event


def test_every_attempt_read_back_has_verified_and_verification(tmp_path: Path) -> None:
    assert {"verified", "verification"} <= set(ATTEMPT_OPTIONAL)
    with EventLog(tmp_path / "m.db") as log:
        sha = log.put_source("k")
        log.append(ATTEMPT, _attempt(sha, 10.0), run_id="r")
        log.append(ATTEMPT, _attempt(sha, 10.0, verified=False, verification=None), run_id="r")
        log.append(ATTEMPT, _attempt(sha, 10.0, **JUDGED), run_id="r")
        got = [(a["verified"], a["verification"]) for a in reversed(log.attempts())]
    assert got == [(False, None), (False, None), (True, "judge:v1+bounds")]


def test_an_unverified_fast_attempt_loses_to_a_slower_verified_one(tmp_path: Path) -> None:
    with EventLog(tmp_path / "m.db") as log:
        fast, slow = log.put_source("fast"), log.put_source("slow")
        log.append(ATTEMPT, _attempt(fast, 1.0, verified=False), run_id="r")
        log.append(ATTEMPT, _attempt(fast, 2.0), run_id="r")  # no verdict at all
        judged = log.append(ATTEMPT, _attempt(slow, 40.0, **JUDGED), run_id="r")
        log.append(ATTEMPT, {**_attempt(fast, 0.5, **JUDGED), "outcome": "incorrect"}, run_id="r")
        best = log.best("mla", "bench")
        assert best is not None and best["id"] == judged.id and best["source"] == "slow"
        assert [b["id"] for b in log.best_all()] == [judged.id]
        assert log.best("mla", "bench", include_unverified=True)["median_us"] == 1.0  # type: ignore[index]
        assert log.best("mla", "bench", device="NVIDIA H200")["id"] == judged.id  # type: ignore[index]


def test_best_of_one_run(tmp_path: Path) -> None:
    with EventLog(tmp_path / "m.db") as log:
        a, b = log.put_source("a"), log.put_source("b")
        mine = log.append(ATTEMPT, _attempt(a, 30.0, **JUDGED), run_id="mine")
        theirs = log.append(ATTEMPT, _attempt(b, 10.0, **JUDGED), run_id="theirs")
        log.append(ATTEMPT, _attempt(b, 5.0), run_id="mine")  # faster, but unverified
        assert log.best("mla", "bench")["id"] == theirs.id  # type: ignore[index]
        got = log.best("mla", "bench", run_id="mine")
        assert got is not None and got["id"] == mine.id and got["run_id"] == "mine" and got["source"] == "a"
        assert log.best("mla", "bench", run_id="mine", include_unverified=True)["median_us"] == 5.0  # type: ignore[index]
        assert log.best("mla", "bench", run_id="nobody") is None


@pytest.mark.parametrize("extra, message", [
    ({"verified": "yes", "verification": "judge:v1"}, "must be bool"),
    ({"verified": 1, "verification": "judge:v1"}, "must be bool"),
    ({"verified": None}, "may not be null"),
    ({"verified": True}, "verified but not how"),
    ({"verified": True, "verification": ""}, "verified but not how"),
    ({"verified": False, "verification": 3}, "must be str"),
])
def test_a_malformed_verdict_is_refused(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate(ATTEMPT, _attempt("s", 1.0, **extra))


def test_a_well_formed_verdict_is_accepted() -> None:
    for extra in ({}, {"verified": False}, {"verified": False, "verification": None}, JUDGED,
                  {"verified": True, "verification": "judge:v1"}):
        validate(ATTEMPT, _attempt("s", 1.0, **extra))
