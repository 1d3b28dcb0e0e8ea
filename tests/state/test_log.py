"""EventLog basics: appending, idempotency keys, reads, sources, validation, paths, threads."""

from __future__ import annotations

import math
import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from state import Event, EventLog, intent_key, state_dir
from state.encoding import canonical_json, source_sha
from state.events import ATTEMPT, NOTE, OUTCOMES, RUN_START, TOOL_INTENT, TOOL_RESULT


def _attempt(**kw: object) -> dict[str, object]:
    base: dict[str, object] = dict(
        problem="softmax", shape="bench", source_sha="0" * 64, tool="profile", outcome="correct", device="cpu"
    )
    base.update(kw)
    return base


def test_default_path_and_private_dir(marathon_home: Path) -> None:
    with EventLog() as log:
        assert log.path == marathon_home / "marathon.db"
        assert log.path.exists()
    assert state_dir() == marathon_home


def test_state_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MARATHON_HOME")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    d = state_dir()
    assert d == tmp_path / "xdg" / "kernel-marathon"
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "kernel-marathon"
    monkeypatch.setenv("MARATHON_HOME", str(tmp_path / "m" / "deeper"))
    assert state_dir() == tmp_path / "m" / "deeper"
    assert stat.S_IMODE((tmp_path / "m" / "deeper").stat().st_mode) == 0o700


def test_pragmas() -> None:
    with EventLog() as log:
        conn = sqlite3.connect(log.path)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()
        c = log._c()
        assert c.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert c.execute("PRAGMA busy_timeout").fetchone()[0] == 30000


def test_append_and_read_back() -> None:
    with EventLog() as log:
        a = log.append(RUN_START, {"goal": "make softmax fast", "extra": [1, 2]}, run_id="r1")
        b = log.append(NOTE, {"text": "hello ✓"}, run_id="r1")
        c = log.append("custom.kind", {"anything": {"nested": True}})
        assert (a.id, b.id, c.id) == (1, 2, 3)
        assert a.ts <= b.ts <= c.ts
        assert not a.existed
        assert log.get(2) == b
        assert log.get(99) is None
        assert [e.id for e in log.events()] == [1, 2, 3]
        assert [e.id for e in log.events(run_id="r1")] == [1, 2]
        assert [e.id for e in log.events(kinds=[NOTE, "custom.kind"])] == [2, 3]
        assert [e.id for e in log.events(kinds=NOTE)] == [2]
        assert [e.id for e in log.events(after_id=1)] == [2, 3]
        assert [e.id for e in log.events(newest_first=True, limit=2)] == [3, 2]
        assert log.events(kinds=[]) == []
        assert log.last_event() == c
        assert log.last_event(run_id="r1") == b
        assert log.last_event(run_id="r1", kind=RUN_START) == a
        assert log.last_event(run_id="nope") is None
        assert b.payload == {"text": "hello ✓"}


def test_idempotent_append_returns_stored_event() -> None:
    with EventLog() as log:
        k = intent_key("profile", {"problem": "softmax", "source": "x"})
        first = log.append(TOOL_INTENT, {"tool": "profile", "args_digest": k, "args": {"a": 1}}, "r", key=k)
        log.append(NOTE, {"text": "in between"})
        again = log.append(TOOL_INTENT, {"tool": "profile", "args_digest": k, "args": {"a": 2}}, "r2", key=k)
        assert again.existed and not first.existed
        assert again.id == first.id
        assert again.payload == first.payload == {"tool": "profile", "args_digest": k, "args": {"a": 1}}
        assert again.run_id == "r"
        assert log.by_key(k) == again
        assert log.by_key("missing") is None
        assert len(log.events()) == 2


def test_key_versions_are_the_key_and_its_suffixed_versions_newest_first() -> None:
    with EventLog() as log:
        base = log.append(NOTE, {"text": "first"}, key="baseline:ab")
        log.append(NOTE, {"text": "a longer key"}, key="baseline:abc")
        log.append(NOTE, {"text": "a key it extends"}, key="baseline:a")
        version = log.append(NOTE, {"text": "second"}, key="baseline:ab:0f")
        assert [e.id for e in log.key_versions("baseline:ab")] == [version.id, base.id]
        assert log.key_versions("baseline:zz") == []


def test_append_many_is_atomic_and_dedupes_keys() -> None:
    with EventLog() as log:
        log.append(NOTE, {"text": "pre"}, key="k0")
        evs = log.append_many(
            [
                (NOTE, {"text": "a"}),
                (NOTE, {"text": "b"}, "r1"),
                (NOTE, {"text": "c"}, "r1", "k1"),
                (NOTE, {"text": "d"}, "r1", "k1"),  # same key as the previous item
                (NOTE, {"text": "e"}, None, "k0"),  # key stored before the batch
            ]
        )
        assert [e.id for e in evs] == [2, 3, 4, 4, 1]
        assert [e.existed for e in evs] == [False, False, False, True, True]
        assert evs[3].payload == {"text": "c"}
        # One invalid item: nothing of the batch is written.
        with pytest.raises(ValueError, match="text"):
            log.append_many([(NOTE, {"text": "f"}), (NOTE, {"no_text": 1})])
        assert len(log.events()) == 4
        assert log.append_many([]) == []


def test_failed_transaction_rolls_back_and_ids_stay_contiguous() -> None:
    with EventLog() as log:
        log.append(NOTE, {"text": "one"})
        with pytest.raises(sqlite3.IntegrityError):
            # The second item breaks the CHECK constraint inside the transaction (bypassing validation).
            log._write([(NOTE, '{"text":"two"}', None, None), (NOTE, "[1]", None, None)])
        assert log.append(NOTE, {"text": "three"}).id == 2
        assert [e.payload["text"] for e in log.events()] == ["one", "three"]


def test_events_are_append_only() -> None:
    with EventLog() as log:
        log.append(NOTE, {"text": "x"})
        sha = log.put_source("src")
        conn = sqlite3.connect(log.path, timeout=5)
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE events SET kind = 'y'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM events")
        with pytest.raises(sqlite3.IntegrityError, match="immutable"):
            conn.execute("DELETE FROM sources WHERE sha256 = ?", (sha,))
        conn.close()


def test_validation_of_known_kinds() -> None:
    with EventLog() as log:
        with pytest.raises(ValueError, match=r"'run\.start' event payload lacks the required field 'goal'"):
            log.append(RUN_START, {})
        with pytest.raises(ValueError, match=r"outcome.*must be one of"):
            log.append(ATTEMPT, _attempt(outcome="great"))
        with pytest.raises(ValueError, match="'tool'"):
            log.append(ATTEMPT, _attempt(tool="bench"))
        with pytest.raises(ValueError, match="median_us"):
            log.append(ATTEMPT, _attempt(median_us="fast"))
        with pytest.raises(ValueError, match="median_us"):
            log.append(ATTEMPT, _attempt(median_us=True))
        with pytest.raises(ValueError, match="device"):
            log.append(ATTEMPT, {k: v for k, v in _attempt().items() if k != "device"})
        with pytest.raises(ValueError, match="intent_id"):
            log.append(TOOL_RESULT, {"tool": "profile", "intent_id": "1", "ok": True})
        with pytest.raises(ValueError, match="tags"):
            log.append(NOTE, {"text": "t", "tags": ["ok", 3]})
        with pytest.raises(ValueError, match="JSON object"):
            log.append(NOTE, ["not", "a", "dict"])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="non-empty string"):
            log.append("", {})
        with pytest.raises(ValueError, match="JSON-serialisable"):
            log.append("custom", {"x": object()})
        with pytest.raises(ValueError, match="run_id"):
            log.append("custom", {}, run_id=3)  # type: ignore[arg-type]
        assert log.events() == []
        # Valid forms, including every outcome, nulls for optional fields, and unknown extras.
        for outcome in OUTCOMES:
            log.append(ATTEMPT, _attempt(outcome=outcome, error_class=None, median_us=None, extra={"k": 1}))
        log.append(TOOL_RESULT, {"tool": "profile", "intent_id": 1, "ok": False, "error": "boom"})
        log.append("future.kind", {"whatever": 1})
        assert len(log.events()) == len(OUTCOMES) + 2


def test_non_finite_floats_are_stored_and_restored() -> None:
    with EventLog() as log:
        ev = log.append(ATTEMPT, _attempt(outcome="incorrect", max_rel_err=math.inf, median_us=math.nan,
                                          extra=[-math.inf]))
        assert ev.payload["max_rel_err"] == "Infinity" and ev.payload["extra"] == ["-Infinity"]
        (a,) = log.attempts()
        assert a["max_rel_err"] == math.inf and math.isnan(a["median_us"])
        assert log.failures_by_class() == {"incorrect": 1}


def test_sources_are_content_addressed() -> None:
    with EventLog() as log:
        text = "import triton\n\ndef entry(x):\n    return x  # ✓\n"
        sha = log.put_source(text)
        assert sha == source_sha(text) and len(sha) == 64
        assert log.put_source(text) == sha
        assert log.source(sha) == text
        assert log.source("f" * 64) is None
        assert log._c().execute("SELECT COUNT(*) FROM sources").fetchone()[0] == 1


def test_intent_key_is_canonical() -> None:
    a = intent_key("profile", {"b": 1, "a": [1, 2, {"y": 0, "x": 1}]})
    b = intent_key("profile", {"a": [1, 2, {"x": 1, "y": 0}], "b": 1})
    assert a == b and len(a) == 64
    assert a != intent_key("compile", {"b": 1, "a": [1, 2, {"y": 0, "x": 1}]})
    assert a != intent_key("profile", {"b": 2, "a": [1, 2, {"y": 0, "x": 1}]})
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'


def test_threads_share_one_log() -> None:
    with EventLog() as log:
        errors: list[BaseException] = []

        def work(t: int) -> None:
            try:
                for i in range(25):
                    log.append(NOTE, {"text": f"{t}:{i}"}, run_id=f"t{t}")
                    log.attempts(limit=5)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors
        ids = [e.id for e in log.events()]
        assert ids == list(range(1, 151))
        for t in range(6):
            texts = [e.payload["text"] for e in log.events(run_id=f"t{t}")]
            assert texts == [f"{t}:{i}" for i in range(25)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_gets_its_own_connection() -> None:
    with EventLog() as log:
        log.append(NOTE, {"text": "parent"})
        pid = os.fork()
        if pid == 0:  # child
            code = 1
            try:
                code = 0 if log.append(NOTE, {"text": "child"}).id == 2 else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert [e.payload["text"] for e in log.events()] == ["parent", "child"]
        assert log.append(NOTE, {"text": "parent again"}).id == 3


def test_closed_log_refuses_use() -> None:
    log = EventLog()
    log.close()
    with pytest.raises(RuntimeError, match="closed"):
        log.append(NOTE, {"text": "late"})
    log.close()  # idempotent


def test_event_as_dict() -> None:
    ev = Event(1, 2.0, "r", NOTE, {"text": "x"}, "k", True)
    want = {"id": 1, "ts": 2.0, "run_id": "r", "kind": NOTE, "payload": {"text": "x"}, "key": "k"}
    assert ev.as_dict() == want


def test_synchronous_choice() -> None:
    with EventLog(synchronous="normal") as log:
        assert log._c().execute("PRAGMA synchronous").fetchone()[0] == 1
    with pytest.raises(ValueError, match="synchronous"):
        EventLog(synchronous="sometimes")


def test_outcome_for_classifies_like_the_tools() -> None:
    from state.events import OUTCOMES, outcome_for

    assert outcome_for("profile", True, None) == "correct"
    assert outcome_for("compile", True, None) == "compiled"
    assert outcome_for("profile", False, "nan") == "incorrect"
    assert outcome_for("profile", False, "cuda_error") == "crashed"
    assert outcome_for("compile", False, "syntax_error") == "compile_error"
    assert outcome_for("profile", False, None) == "error"
    assert outcome_for("profile", False, "something_new") == "error"
    for cls in ("rejected", "timeout", "incorrect", "crashed"):
        assert outcome_for("profile", False, cls) in OUTCOMES
