"""The database schema: numbered migrations for the tables, and a derived layer of views.

Tables hold the truth and change only through `MIGRATIONS`, applied in order on open, each in its
own BEGIN IMMEDIATE transaction that also sets PRAGMA user_version, so a crash mid-upgrade leaves
the database at the last finished version and two processes opening an old file at once upgrade it
once. Migrations are frozen SQL text: never edit one that has shipped, append a new one.

Views and their expression indexes are derived from the events and cheap to recreate, so they are
not migrated: on open, `ensure_derived` compares their stored SQL with `DERIVED` and recreates the
whole layer when anything differs (or is missing). Changing a view is an edit to `DERIVED`: the
stored SQL is the layer's version, so a database whose views were made by an older release gets the
new ones on its next open (e.g. the `verified` column, which marks attempts logged before it existed
as unverified without touching an event).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Migration:
    version: int  # the user_version after it is applied
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "events (append-only log) and sources (content-addressed kernel text)",
        (
            """CREATE TABLE events (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                ts REAL NOT NULL,
                run_id TEXT,
                kind TEXT NOT NULL,
                payload TEXT NOT NULL CHECK (json_valid(payload) AND json_type(payload) = 'object'),
                key TEXT UNIQUE
            )""",
            """CREATE TABLE sources (
                sha256 TEXT PRIMARY KEY,
                text TEXT NOT NULL,
                created REAL NOT NULL
            )""",
        ),
    ),
    Migration(
        2,
        "append-only triggers; indexes on kind and run_id",
        (
            "CREATE INDEX events_kind ON events(kind, id)",
            "CREATE INDEX events_run ON events(run_id, id)",
            """CREATE TRIGGER events_no_update BEFORE UPDATE ON events
               BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
            """CREATE TRIGGER events_no_delete BEFORE DELETE ON events
               BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
            """CREATE TRIGGER sources_no_update BEFORE UPDATE ON sources
               BEGIN SELECT RAISE(ABORT, 'sources are immutable'); END""",
            """CREATE TRIGGER sources_no_delete BEFORE DELETE ON sources
               BEGIN SELECT RAISE(ABORT, 'sources are immutable'); END""",
        ),
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version


class SchemaTooNewError(RuntimeError):
    """The database was written by a newer kernel-marathon than this one."""


def _j(field: str) -> str:
    return f"json_extract(payload, '$.{field}')"


# 1 only for a JSON true: an attempt logged before the field existed (or with false) is unverified.
_VERIFIED = "CASE WHEN json_type(payload, '$.verified') = 'true' THEN 1 ELSE 0 END"


# (type, name, sql). Indexes first: views are dropped before them and created after.
DERIVED: tuple[tuple[str, str, str], ...] = (
    # A run's events of one kind (its run.start, its last run.end or budget) without a run scan.
    ("index", "events_run_kind", "CREATE INDEX events_run_kind ON events(run_id, kind, id)"),
    (
        "index",
        "attempts_by_problem",
        f"CREATE INDEX attempts_by_problem ON events({_j('problem')}, {_j('shape')}, id) "
        "WHERE kind = 'attempt'",
    ),
    (
        "index",
        "attempts_by_time",
        f"CREATE INDEX attempts_by_time ON events({_j('problem')}, {_j('shape')}, {_j('outcome')}, "
        f"{_VERIFIED}, {_j('median_us')}, id) WHERE kind = 'attempt'",
    ),
    (
        "view",
        "attempts",
        "CREATE VIEW attempts AS SELECT id, ts, run_id, "
        f"{_j('problem')} AS problem, {_j('shape')} AS shape, {_j('outcome')} AS outcome, "
        f"{_j('error_class')} AS error_class, {_j('median_us')} AS median_us, "
        f"{_j('speedup')} AS speedup, {_j('device')} AS device, {_j('source_sha')} AS source_sha, "
        f"{_j('tool')} AS tool, {_VERIFIED} AS verified, {_j('verification')} AS verification, "
        "payload FROM events WHERE kind = 'attempt'",
    ),
    (
        "view",
        "best_attempts",
        # Per problem and shape: the fastest timed verified correct attempt (earliest on a tie), else
        # the newest verified correct one. Unverified attempts (all those logged before `verified`
        # existed) are never best.
        "CREATE VIEW best_attempts AS SELECT * FROM (SELECT a.*, ROW_NUMBER() OVER ("
        "PARTITION BY problem, shape ORDER BY "
        "CASE WHEN typeof(median_us) IN ('integer', 'real') THEN 0 ELSE 1 END, "
        "CASE WHEN typeof(median_us) IN ('integer', 'real') THEN median_us END, "
        "CASE WHEN typeof(median_us) IN ('integer', 'real') THEN id ELSE -id END) AS rank "
        "FROM attempts a WHERE outcome = 'correct' AND verified = 1) WHERE rank = 1",
    ),
    (
        "view",
        "failures",
        # "compiled" is a successful compile, not a failure. An unclassified failure counts under
        # its outcome.
        "CREATE VIEW failures AS SELECT id, ts, run_id, problem, shape, outcome, "
        "COALESCE(error_class, outcome) AS error_class, payload FROM attempts "
        "WHERE outcome NOT IN ('correct', 'compiled')",
    ),
    (
        "view",
        "notes",
        f"CREATE VIEW notes AS SELECT id, ts, run_id, {_j('problem')} AS problem, {_j('shape')} AS shape, "
        f"{_j('text')} AS text, {_j('tags')} AS tags, payload FROM events WHERE kind = 'note'",
    ),
    (
        "view",
        "runs",
        "CREATE VIEW runs AS SELECT r.run_id, r.first_id, r.last_id, r.first_ts, r.last_ts, r.events, "
        "(SELECT kind FROM events WHERE id = r.last_id) AS last_kind, "
        "(SELECT json_extract(payload, '$.goal') FROM events "
        " WHERE run_id = r.run_id AND kind = 'run.start' ORDER BY id LIMIT 1) AS goal, "
        "(SELECT json_extract(payload, '$.state') FROM events "
        " WHERE run_id = r.run_id AND kind = 'run.end' ORDER BY id DESC LIMIT 1) AS end_state "
        "FROM (SELECT run_id, MIN(id) AS first_id, MAX(id) AS last_id, MIN(ts) AS first_ts, "
        "MAX(ts) AS last_ts, COUNT(*) AS events FROM events WHERE run_id IS NOT NULL GROUP BY run_id) r",
    ),
)


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _too_new(version: int, path: Path | str) -> SchemaTooNewError:
    return SchemaTooNewError(
        f"{path}: event log schema version {version} is newer than this kernel-marathon understands "
        f"({SCHEMA_VERSION}); upgrade kernel-marathon (the database was left untouched)"
    )


def migrate(conn: sqlite3.Connection, path: Path | str) -> int:
    """Bring the database up to SCHEMA_VERSION; returns the version it had before.

    `conn` must be in autocommit mode (isolation_level=None) with no open transaction.
    """
    start = user_version(conn)
    if start > SCHEMA_VERSION:
        raise _too_new(start, path)
    for m in MIGRATIONS:
        if m.version <= start:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = user_version(conn)  # another process may have got here first
            if current > SCHEMA_VERSION:
                raise _too_new(current, path)
            if current >= m.version:
                conn.execute("COMMIT")
                continue
            if current != m.version - 1:
                raise RuntimeError(f"{path}: cannot apply migration {m.version} to version {current}")
            for sql in m.statements:
                try:
                    conn.execute(sql)
                except sqlite3.Error as e:
                    raise RuntimeError(
                        f"{path}: migration to version {m.version} ({m.description}) failed: {e}"
                    ) from e
            conn.execute(f"PRAGMA user_version = {m.version}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return start


def _norm(sql: str | None) -> str:
    return " ".join((sql or "").split())


def _derived_current(conn: sqlite3.Connection) -> bool:
    names = [name for _, name, _ in DERIVED]
    marks = ",".join("?" * len(names))
    rows = conn.execute(f"SELECT type, name, sql FROM sqlite_master WHERE name IN ({marks})", names)
    have = {(t, n): _norm(s) for t, n, s in rows.fetchall()}
    return all(have.get((t, n)) == _norm(sql) for t, n, sql in DERIVED)


def ensure_derived(conn: sqlite3.Connection, force: bool = False) -> bool:
    """Recreate the views and their indexes if any differs from `DERIVED` (or always, with force).

    Returns whether it rebuilt. Same connection requirements as `migrate`.
    """
    if not force and _derived_current(conn):
        return False
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not force and _derived_current(conn):
            conn.execute("COMMIT")
            return False
        for kind, name, _ in reversed(DERIVED):
            conn.execute(f"DROP {kind.upper()} IF EXISTS {name}")
        for _, _, sql in DERIVED:
            conn.execute(sql)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return True
