"""Queries over the derived views: attempts, best-so-far, failure counts, notes, runs.

These are what the agent's memory is made of (DESIGN.md §3, §8): the pinned block and the MCP
event-log tools are built from them, never from a transcript. Each function takes a
sqlite_utils.Database and returns plain dicts, so callers need no SQL.
"""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from .encoding import restore_float
from .events import ATTEMPT_FLOATS, ATTEMPT_OPTIONAL

_TIMED = "typeof(median_us) IN ('integer', 'real')"


def _where(filters: dict[str, Any]) -> tuple[str, list[Any]]:
    clauses = [f"{column} = ?" for column, value in filters.items() if value is not None]
    params = [value for value in filters.values() if value is not None]
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _merge(row: dict[str, Any]) -> dict[str, Any]:
    """The payload plus the event's id, ts and run_id (which win over payload keys of those names)."""
    out: dict[str, Any] = json.loads(row["payload"])
    out.update(id=row["id"], ts=row["ts"], run_id=row["run_id"])
    return out


def attempt_dict(row: dict[str, Any]) -> dict[str, Any]:
    """An attempt as callers see it: every optional field present, non-finite floats restored, and
    `verified` a bool (False for an attempt logged without it: before the field existed)."""
    out = _merge(row)
    for name in ATTEMPT_OPTIONAL:
        out.setdefault(name, None)
    out["verified"] = out["verified"] is True
    for name in ATTEMPT_FLOATS:
        out[name] = restore_float(out[name])
    return out


def attempts(
    db: sqlite_utils.Database,
    problem: str | None = None,
    shape: str | None = None,
    outcome: str | None = None,
    run_id: str | None = None,
    limit: int | None = 50,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """Attempts, newest first, filtered by any of problem, shape, outcome, run_id."""
    where, params = _where({"problem": problem, "shape": shape, "outcome": outcome, "run_id": run_id})
    sql = f"SELECT id, ts, run_id, payload FROM attempts{where} ORDER BY id DESC LIMIT ? OFFSET ?"
    rows = db.query(sql, [*params, -1 if limit is None else limit, offset])
    return [attempt_dict(r) for r in rows]


def best(
    db: sqlite_utils.Database,
    problem: str,
    shape: str,
    device: str | None = None,
    run_id: str | None = None,
    include_unverified: bool = False,
) -> dict[str, Any] | None:
    """The fastest timed verified correct attempt (earliest on a tie); else the newest verified correct
    one; else None. With `run_id`, only that run's attempts; with `device`, only that device's.

    Unverified attempts (every attempt logged before `verified` existed, and any the judge did not
    vouch for) never count unless `include_unverified` is set, for looking into an old log.
    The result carries "source": the kernel text (None if it was never stored).
    """
    where, params = _where({"problem": problem, "shape": shape, "outcome": "correct", "device": device,
                            "run_id": run_id, "verified": None if include_unverified else 1})
    select = f"SELECT id, ts, run_id, payload FROM attempts{where}"
    rows = list(db.query(f"{select} AND {_TIMED} ORDER BY median_us, id LIMIT 1", params))
    if not rows:
        rows = list(db.query(f"{select} ORDER BY id DESC LIMIT 1", params))
    if not rows:
        return None
    out = attempt_dict(rows[0])
    found = list(db.query("SELECT text FROM sources WHERE sha256 = ?", [out.get("source_sha")]))
    out["source"] = found[0]["text"] if found else None
    return out


def best_all(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """The best verified attempt of every problem and shape (device-agnostic, any run), without source
    text; a pair with no verified correct attempt is left out."""
    rows = db.query("SELECT id, ts, run_id, payload FROM best_attempts ORDER BY problem, shape")
    return [attempt_dict(r) for r in rows]


def failures_by_class(
    db: sqlite_utils.Database, problem: str | None = None, run_id: str | None = None
) -> dict[str, int]:
    """Counts of error_class over failed attempts, most frequent first.

    Failed means any outcome but "correct" and "compiled" (a successful compile); a failure with no
    error_class counts under its outcome (e.g. "timeout").
    """
    where, params = _where({"problem": problem, "run_id": run_id})
    sql = (
        f"SELECT error_class, COUNT(*) AS n FROM failures{where} "
        "GROUP BY error_class ORDER BY n DESC, error_class"
    )
    return {r["error_class"]: r["n"] for r in db.query(sql, params)}


def notes(
    db: sqlite_utils.Database, problem: str | None = None, run_id: str | None = None, limit: int | None = 50
) -> list[dict[str, Any]]:
    """Notes, newest first; each has text, problem, shape and tags (a list) present."""
    where, params = _where({"problem": problem, "run_id": run_id})
    sql = f"SELECT id, ts, run_id, payload FROM notes{where} ORDER BY id DESC LIMIT ?"
    out = []
    for row in db.query(sql, [*params, -1 if limit is None else limit]):
        note = _merge(row)
        note.setdefault("problem", None)
        note.setdefault("shape", None)
        note["tags"] = note.get("tags") or []
        out.append(note)
    return out


def runs(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """Every run: run_id, first_id, last_id, first_ts, last_ts, events (count), last_kind, goal
    (from its first run.start) and end_state (from its last run.end, None while unfinished);
    most recently active first."""
    return list(db.query("SELECT * FROM runs ORDER BY last_id DESC"))
