"""Schema versions: old databases are upgraded on open, newer ones are refused untouched."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from state import SCHEMA_VERSION, EventLog, SchemaTooNewError
from state.schema import MIGRATIONS

# Version 1 written out by hand (not taken from MIGRATIONS), as a database from that release would be.
V1 = [
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ts REAL NOT NULL,
        run_id TEXT,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL CHECK (json_valid(payload) AND json_type(payload) = 'object'),
        key TEXT UNIQUE
    )""",
    "CREATE TABLE sources (sha256 TEXT PRIMARY KEY, text TEXT NOT NULL, created REAL NOT NULL)",
    "PRAGMA user_version = 1",
]


def _objects(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall()
        return dict(rows)
    finally:
        conn.close()


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def test_versions_are_numbered_in_order() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert SCHEMA_VERSION >= 2


def test_version_1_database_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    for sql in V1:
        conn.execute(sql)
    attempt = {"problem": "mla", "shape": "bench", "source_sha": "s", "tool": "profile", "outcome": "correct",
               "device": "H200", "median_us": 12.5}
    conn.execute("INSERT INTO events (ts, run_id, kind, payload) VALUES (1.0, 'old', 'attempt', ?)",
                 (json.dumps(attempt),))
    conn.execute("INSERT INTO sources VALUES ('s', 'old kernel', 1.0)")
    conn.commit()
    conn.close()
    assert _version(path) == 1
    assert "attempts" not in _objects(path)

    with EventLog(path) as log:
        assert log.schema_version == SCHEMA_VERSION
        # the old event shows through the new views, marked unverified: never best unless asked for
        assert [(a["id"], a["verified"], a["verification"]) for a in log.attempts()] == [(1, False, None)]
        assert log.best("mla", "bench") is None and log.best_all() == []
        best = log.best("mla", "bench", include_unverified=True)
        assert best is not None and best["id"] == 1 and best["source"] == "old kernel"
        assert log.append("note", {"text": "new"}, run_id="old").id == 2
    assert _version(path) == SCHEMA_VERSION
    objects = _objects(path)
    assert objects["events_kind"] == "index" and objects["events_no_update"] == "trigger"
    assert objects["attempts"] == "view" and objects["attempts_by_problem"] == "index"
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM events")
    conn.close()


def test_fresh_database_gets_every_migration(tmp_path: Path) -> None:
    with EventLog(tmp_path / "new.db") as log:
        assert log.schema_version == SCHEMA_VERSION
    with EventLog(tmp_path / "new.db") as log:  # reopening is a no-op
        assert log.schema_version == SCHEMA_VERSION


def test_newer_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with EventLog(path) as log:
        log.append("note", {"text": "x"})
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.execute("DROP VIEW attempts")  # if it were "repaired", the derived layer would come back
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNewError, match=rf"version {SCHEMA_VERSION + 1} is newer"):
        EventLog(path)
    assert _version(path) == SCHEMA_VERSION + 1
    assert "attempts" not in _objects(path)


def test_failed_migration_leaves_the_last_good_version(tmp_path: Path) -> None:
    path = tmp_path / "broken.db"
    conn = sqlite3.connect(path)
    for sql in V1:
        conn.execute(sql)
    conn.execute("CREATE INDEX events_kind ON events(ts)")  # collides with what version 2 creates
    conn.commit()
    conn.close()
    with pytest.raises(RuntimeError, match="migration to version 2"):
        EventLog(path)
    assert _version(path) == 1
    assert "events_no_update" not in _objects(path)  # version 2 rolled back as a whole
