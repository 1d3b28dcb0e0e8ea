"""Crash safety and multi-process writing, with real processes and real SIGKILLs.

A writer prints each id only after append() has returned (the commit is done), so every printed id
is an acknowledged event that must survive the kill.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from state import SCHEMA_VERSION, EventLog

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import sys
    from state import EventLog
    path, run_id, batch, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    log = EventLog(path)
    last = log.last_event()
    i = last.id if last else 0  # single writer: payload i == id - 1
    done = 0
    while count < 0 or done < count:
        if batch == 1:
            ids = [log.append("note", {"text": run_id, "i": i}, run_id=run_id).id]
        else:
            evs = log.append_many([("note", {"text": run_id, "i": i + j}, run_id) for j in range(batch)])
            ids = [e.id for e in evs]
        print(ids[-1], flush=True)
        i += batch
        done += batch
    """
)

KEYED_WRITER = textwrap.dedent(
    """
    import sys
    from state import EventLog
    path, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    log = EventLog(path)
    for k in range(n):
        ev = log.append("note", {"text": who, "k": k}, key=f"key-{k}")
        print(k, ev.id, int(ev.existed), flush=True)
    """
)


def _spawn(script: str, *args: object) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _kill_after(proc: subprocess.Popen[str], lines: int, rng: random.Random) -> list[int]:
    """Read `lines` acknowledged ids, then SIGKILL at a random instant; returns every acknowledged id."""
    assert proc.stdout is not None
    acked: list[int] = []
    for line in proc.stdout:
        acked.append(int(line))
        if len(acked) >= lines:
            break
    time.sleep(rng.uniform(0, 0.004))  # land anywhere in the next transaction
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    acked += [int(x) for x in out.split()]
    assert proc.returncode == -signal.SIGKILL, err
    assert acked, f"writer acknowledged nothing: {err}"
    return acked


def _check_db(path: Path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchone():
            return []  # killed before the first migration committed
        return [r[0] for r in conn.execute("SELECT id FROM events ORDER BY id")]
    finally:
        conn.close()


@pytest.mark.parametrize("batch", [1, 7])
def test_sigkill_mid_stream_loses_no_acknowledged_event(tmp_path: Path, batch: int) -> None:
    path = tmp_path / "kill.db"
    rng = random.Random(batch)
    acked_all: list[int] = []
    for _ in range(3):
        acked = _kill_after(_spawn(WRITER, path, "w", batch, -1), rng.randint(1, 60), rng)
        acked_all += acked
        ids = _check_db(path)
        assert ids == list(range(1, len(ids) + 1)), "ids are not contiguous"
        assert set(acked_all) <= set(ids), "an acknowledged event was lost"
        # At most the one batch that committed just before the kill was never acknowledged.
        assert max(acked) <= ids[-1] <= max(acked) + batch
        assert len(ids) % batch == 0, "a batch was partly committed"
    with EventLog(path) as log:
        events = log.events()
        assert [e.payload["i"] for e in events] == [e.id - 1 for e in events]
        assert log.schema_version == SCHEMA_VERSION


def test_sigkill_during_open_and_first_writes(tmp_path: Path) -> None:
    """Kill writers at random moments from opening (schema creation, migrations) into the first writes."""
    path = tmp_path / "early.db"
    rng = random.Random(0)
    early = "import state; print('ready', flush=True)\n" + WRITER
    for _ in range(6):
        proc = _spawn(early, path, "w", 1, -1)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0, 0.04))  # opening takes about 30 ms here
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        ids = _check_db(path) if path.exists() else []
        assert {int(x) for x in out.split()} <= set(ids)
        assert ids == list(range(1, len(ids) + 1))
    with EventLog(path) as log:  # whatever state the kills left, it opens and upgrades
        assert log.schema_version == SCHEMA_VERSION
        before = len(log.events())
        assert log.append("note", {"text": "after", "i": before}).id == before + 1


def test_two_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    EventLog(path).close()  # create the schema first so both start writing at once
    n, m = 150, 120
    procs = [_spawn(WRITER, path, "a", 1, n), _spawn(WRITER, path, "b", 3, m)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    with EventLog(path) as log:
        events = log.events()
        assert len(events) == n + m
        assert [e.id for e in events] == list(range(1, n + m + 1))
        for run, count in (("a", n), ("b", m)):
            mine = log.events(run_id=run)
            assert len(mine) == count
            seq = [e.payload["i"] for e in mine]
            assert seq == sorted(seq) and len(set(seq)) == count  # each writer's commits stay in order
        acked = {int(x) for out, _ in outs for x in out.split()}
        assert acked <= {e.id for e in events}


def test_concurrent_same_keys_are_written_once(tmp_path: Path) -> None:
    path = tmp_path / "keys.db"
    EventLog(path).close()
    n = 80
    procs = [_spawn(KEYED_WRITER, path, who, n) for who in ("x", "y")]
    outs = [p.communicate(timeout=120) for p in procs]
    seen: list[dict[int, tuple[int, int]]] = []
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        seen.append({int(k): (int(i), int(e)) for k, i, e in (line.split() for line in out.splitlines())})
    with EventLog(path) as log:
        events = log.events()
        assert len(events) == n
        assert sorted(e.key for e in events if e.key) == sorted(f"key-{k}" for k in range(n))
        for k in range(n):
            (id_x, ex_x), (id_y, ex_y) = seen[0][k], seen[1][k]
            assert id_x == id_y, f"key-{k} got two ids"
            assert ex_x + ex_y == 1, f"key-{k}: exactly one writer must have created it"
            stored = log.by_key(f"key-{k}")
            assert stored is not None and stored.payload["text"] == ("x" if ex_y else "y")


def test_processes_creating_one_fresh_log_at_once(tmp_path: Path) -> None:
    """Switching a new file to WAL needs an exclusive lock that SQLite does not wait for: opening retries."""
    for round_ in range(2):
        path = tmp_path / f"fresh{round_}.db"
        procs = [_spawn(WRITER, path, f"p{i}", 1, 5) for i in range(5)]
        for p in procs:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
        with EventLog(path) as log:
            assert [e.id for e in log.events()] == list(range(1, 26))
            assert sorted(r["run_id"] for r in log.runs()) == [f"p{i}" for i in range(5)]
