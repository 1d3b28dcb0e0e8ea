"""EventLog: the append-only SQLite event log that every part of kernel-marathon writes to.

Durability. The database runs in WAL mode with synchronous=FULL. In WAL mode SQLite writes a commit
to the -wal file; with FULL it fsyncs that file before COMMIT returns, so a commit that returned
survives both kill -9 (the bytes are in the OS page cache either way) and a power cut (they are on
the disk, as far as the disk honours fsync). With NORMAL it fsyncs only at checkpoints: still safe
against kill -9 and never corrupt, but a power cut may roll back the last commits, which for this
log means forgetting attempts and tool results that were already reported. An fsync per event costs
little next to a tool call (benchmarks/bench_state.py measures it); fullfsync is set too, which
matters on macOS, where plain fsync does not flush the drive's cache.

Concurrency. The server, the client and the CLI open the same file at once. Every write runs in
BEGIN IMMEDIATE, which takes the write lock up front (waiting up to the 30 s busy timeout), so an
idempotency-key check and its insert cannot interleave with another writer, and no transaction
fails half-way on a lock upgrade. One transaction per event (or per `append_many` batch). Readers
never block writers in WAL. Within a process, one connection is shared under a lock, so an EventLog
may be used from several threads; after a fork the child opens its own connection.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import sqlite_utils

from . import schema, views
from .encoding import dumps_payload, source_sha
from .events import validate
from .export import export_run
from .paths import default_db_path, ensure_private_dir
from .record import Event

BUSY_TIMEOUT_S = 30.0
SYNCHRONOUS = ("FULL", "NORMAL", "EXTRA", "OFF")


_COLUMNS = 'id, ts, run_id, kind, payload, "key"'
_BY_KEY = f'SELECT {_COLUMNS} FROM events WHERE "key" = ?'
# A key and its versions ("K" and "K:<suffix>"): a range over the unique index, ";" being the character after ":".
_KEY_VERSIONS = f'SELECT {_COLUMNS} FROM events WHERE "key" = ? OR ("key" > ? AND "key" < ?) ORDER BY id DESC'
EventSpec = tuple  # (kind, payload) | (kind, payload, run_id) | (kind, payload, run_id, key)


def _row_event(row: Sequence[Any], existed: bool = False) -> Event:
    return Event(row[0], row[1], row[2], row[3], json.loads(row[4]), row[5], existed)


class EventLog:
    """The event log at `path` (None: state_dir()/marathon.db), upgraded to the current schema.

    `synchronous` exists for benchmarks and throwaway logs; keep the default (FULL) for real runs.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, synchronous: str = "FULL") -> None:
        self.path = Path(path) if path is not None else default_db_path()
        if synchronous.upper() not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS}, got {synchronous!r}")
        self.synchronous = synchronous.upper()
        self._lock = threading.RLock()
        self._stale: list[sqlite3.Connection] = []  # inherited over fork: never used nor closed
        self._conn: sqlite3.Connection | None = None
        self._db: sqlite_utils.Database | None = None
        self._pid = -1
        self._closed = False
        self._connect()

    # -- connection -------------------------------------------------------------------------

    def _connect(self) -> None:
        if str(self.path) != ":memory:":
            ensure_private_dir(self.path.parent)
        conn = sqlite3.connect(
            str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            db = sqlite_utils.Database(conn)
            self._enable_wal(db)
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA fullfsync = ON")
            conn.execute("PRAGMA checkpoint_fullfsync = ON")
            conn.execute("PRAGMA journal_size_limit = 67108864")  # trim the -wal file after checkpoints
            conn.execute("PRAGMA foreign_keys = ON")
            schema.migrate(conn, self.path)
            schema.ensure_derived(conn)
        except BaseException:
            conn.close()
            raise
        self._conn, self._db, self._pid = conn, db, os.getpid()

    def _enable_wal(self, db: sqlite_utils.Database) -> None:
        """Switch to WAL, retrying: the switch needs an exclusive lock, and SQLite answers "database is
        locked" at once, without waiting, while another process is creating the same file."""
        if str(self.path) == ":memory:":
            return
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        delay = 0.005
        while True:
            try:
                db.enable_wal()
                break
            except sqlite3.OperationalError as e:
                if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
        if db.journal_mode != "wal":
            raise RuntimeError(
                f"{self.path}: SQLite could not enable WAL mode here (journal_mode={db.journal_mode!r}); "
                "put the event log on a local filesystem"
            )

    def _c(self) -> sqlite3.Connection:
        """The connection for this process (call with the lock held)."""
        if self._closed:
            raise RuntimeError(f"EventLog({self.path}) is closed")
        if self._pid != os.getpid():
            # SQLite connections must not cross fork (https://sqlite.org/howtocorrupt.html §2.6):
            # keep the parent's object alive but untouched, and open a fresh one.
            if self._conn is not None:
                self._stale.append(self._conn)
            self._connect()
        assert self._conn is not None
        return self._conn

    def _sdb(self) -> sqlite_utils.Database:
        self._c()
        assert self._db is not None
        return self._db

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and not self._closed and self._pid == os.getpid():
                self._conn.close()
            self._closed = True

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EventLog({str(self.path)!r})"

    @property
    def schema_version(self) -> int:
        with self._lock:
            return schema.user_version(self._c())

    def rebuild_views(self) -> None:
        """Drop and recreate the derived views and their indexes (they hold nothing of their own)."""
        with self._lock:
            schema.ensure_derived(self._c(), force=True)

    # -- writing ----------------------------------------------------------------------------

    def _write(self, items: list[tuple[str, str, str | None, str | None]]) -> list[Event]:
        """Insert (kind, payload_json, run_id, key) rows in one IMMEDIATE transaction."""
        with self._lock:
            conn = self._c()
            conn.execute("BEGIN IMMEDIATE")
            try:
                out: list[Event] = []
                for kind, text, run_id, key in items:
                    if key is not None:
                        row = conn.execute(_BY_KEY, (key,)).fetchone()
                        if row is not None:
                            out.append(_row_event(row, existed=True))
                            continue
                    ts = time.time()
                    cur = conn.execute(
                        'INSERT INTO events (ts, run_id, kind, payload, "key") VALUES (?, ?, ?, ?, ?)',
                        (ts, run_id, kind, text, key),
                    )
                    assert cur.lastrowid is not None
                    out.append(Event(cur.lastrowid, ts, run_id, kind, json.loads(text), key, False))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return out

    @staticmethod
    def _prepare(kind: str, payload: Any, run_id: str | None, key: str | None) -> tuple[str, str, Any, Any]:
        validate(kind, payload)
        if run_id is not None and not isinstance(run_id, str):
            raise ValueError(f"run_id must be a string or None, got {type(run_id).__name__}")
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError(f"key must be a non-empty string or None, got {key!r}")
        return kind, dumps_payload(payload), run_id, key

    def append(
        self, kind: str, payload: dict[str, Any], run_id: str | None = None, key: str | None = None
    ) -> Event:
        """Append one event and commit it; returns it once it is durable.

        With a `key` that is already stored, nothing is written and the stored event comes back
        unchanged with existed=True (whatever kind, payload or run_id this call passed).
        """
        prepared = self._prepare(kind, payload, run_id, key)
        if key is not None:  # fast path for replays: no write lock needed
            found = self.by_key(key)
            if found is not None:
                return found
        return self._write([prepared])[0]

    def append_many(self, events: Iterable[EventSpec]) -> list[Event]:
        """Append a batch atomically: all are committed together, or none (on any error).

        Each item is (kind, payload[, run_id[, key]]). Keys behave as in `append`, also against
        earlier items of the same batch.
        """
        prepared = []
        for i, item in enumerate(events):
            if not isinstance(item, (tuple, list)) or not 2 <= len(item) <= 4:
                raise ValueError(
                    f"append_many item {i}: expected (kind, payload[, run_id[, key]]), got {item!r:.80}"
                )
            kind, payload, run_id, key = (*item, None, None)[:4]
            prepared.append(self._prepare(kind, payload, run_id, key))
        return self._write(prepared) if prepared else []

    def put_source(self, text: str) -> str:
        """Store a kernel source once, by content; returns its sha256 (the same text, the same sha)."""
        if not isinstance(text, str):
            raise ValueError(f"source must be str, got {type(text).__name__}")
        sha = source_sha(text)
        with self._lock:
            conn = self._c()
            if conn.execute("SELECT 1 FROM sources WHERE sha256 = ?", (sha,)).fetchone():
                return sha
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT OR IGNORE INTO sources (sha256, text, created) VALUES (?, ?, ?)",
                    (sha, text, time.time()),
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return sha

    # -- reading ----------------------------------------------------------------------------

    def source(self, sha: str) -> str | None:
        with self._lock:
            row = self._c().execute("SELECT text FROM sources WHERE sha256 = ?", (sha,)).fetchone()
        return row[0] if row else None

    def get(self, event_id: int) -> Event | None:
        with self._lock:
            row = self._c().execute(f"SELECT {_COLUMNS} FROM events WHERE id = ?", (event_id,)).fetchone()
        return _row_event(row) if row else None

    def by_key(self, key: str) -> Event | None:
        """The event stored under an idempotency key (existed=True), or None."""
        with self._lock:
            row = self._c().execute(_BY_KEY, (key,)).fetchone()
        return _row_event(row, existed=True) if row else None

    def key_versions(self, key: str) -> list[Event]:
        """The events stored under `key` or a version of it (`key:<suffix>`), newest first: a cached result that a
        later one (a refresh, or a measurement that replaced an entry no longer readable) supersedes."""
        with self._lock:
            rows = self._c().execute(_KEY_VERSIONS, (key, f"{key}:", f"{key};")).fetchall()
        return [_row_event(r, existed=True) for r in rows]

    def events(
        self,
        run_id: str | None = None,
        kinds: str | Iterable[str] | None = None,
        after_id: int = 0,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        """Events with id > after_id, optionally of one run and of some kinds, in id order."""
        clauses: list[str] = ["id > ?"]
        params: list[Any] = [after_id]
        if run_id is not None:
            clauses.append("run_id = ?")
            params.append(run_id)
        if kinds is not None:
            kinds = [kinds] if isinstance(kinds, str) else list(kinds)
            if not kinds:
                return []
            clauses.append(f"kind IN ({','.join('?' * len(kinds))})")
            params.extend(kinds)
        sql = (
            f"SELECT {_COLUMNS} FROM events WHERE {' AND '.join(clauses)} "
            f"ORDER BY id {'DESC' if newest_first else 'ASC'} LIMIT ?"
        )
        params.append(-1 if limit is None else limit)
        with self._lock:
            rows = self._c().execute(sql, params).fetchall()
        return [_row_event(r) for r in rows]

    def last_event(self, run_id: str | None = None, kind: str | None = None) -> Event | None:
        """The newest event, optionally of one run and one kind."""
        found = self.events(run_id=run_id, kinds=kind, limit=1, newest_first=True)
        return found[0] if found else None

    def attempts(
        self,
        problem: str | None = None,
        shape: str | None = None,
        outcome: str | None = None,
        run_id: str | None = None,
        limit: int | None = 50,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Attempts newest first; each is its payload plus "id", "ts", "run_id" (see state.views)."""
        with self._lock:
            return views.attempts(self._sdb(), problem, shape, outcome, run_id, limit, offset)

    def best(
        self,
        problem: str,
        shape: str,
        device: str | None = None,
        run_id: str | None = None,
        include_unverified: bool = False,
    ) -> dict[str, Any] | None:
        """Best verified attempt for a problem and shape (of one run, with `run_id`), plus its
        "source" text (see state.views.best)."""
        with self._lock:
            return views.best(self._sdb(), problem, shape, device, run_id, include_unverified)

    def best_all(self) -> list[dict[str, Any]]:
        """The best verified attempt of every problem and shape (no source text)."""
        with self._lock:
            return views.best_all(self._sdb())

    def failures_by_class(self, problem: str | None = None, run_id: str | None = None) -> dict[str, int]:
        with self._lock:
            return views.failures_by_class(self._sdb(), problem, run_id)

    def notes(
        self, problem: str | None = None, run_id: str | None = None, limit: int | None = 50
    ) -> list[dict[str, Any]]:
        with self._lock:
            return views.notes(self._sdb(), problem, run_id, limit)

    def runs(self) -> list[dict[str, Any]]:
        with self._lock:
            return views.runs(self._sdb())

    def export_jsonl(self, run_id: str, fp: IO[str]) -> int:
        """Write a run as JSON Lines (format in state.export); returns the number of lines."""
        return export_run(self, run_id, fp)
