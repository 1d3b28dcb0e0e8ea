"""Exporting a run to JSON Lines and reading it back."""

from __future__ import annotations

import io
import json
import math

import pytest

from state import EventLog, read_jsonl
from state import export as export_mod


def test_export_round_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export_mod, "PAGE", 3)  # exercise paging with a small run
    with EventLog() as log:
        log.append("run.start", {"goal": "fast ✓"}, run_id="r")
        log.append("note", {"text": "other run"}, run_id="other")
        sha_a, sha_b = log.put_source("kernel A\n"), log.put_source("kernel B\n")
        for i, sha in enumerate([sha_a, sha_b, sha_a, sha_b, sha_a]):
            log.append("attempt", dict(problem="p", shape="bench", source_sha=sha, tool="profile",
                                       outcome="incorrect", device="cpu", max_rel_err=math.inf, i=i),
                       run_id="r", key=f"k{i}")
        log.append("note", {"text": "names a missing source", "source_sha": "f" * 64}, run_id="r")
        log.append("run.end", {"state": "done", "reason": None}, run_id="r")

        buf = io.StringIO()
        n = log.export_jsonl("r", buf)
        lines = buf.getvalue().splitlines()
        assert n == len(lines) == 8 + 2
        records = [json.loads(line) for line in lines]  # every line is a JSON object on its own
        assert [r["type"] for r in records[:4]] == ["event", "source", "event", "source"]
        assert records[1] == {"type": "source", "sha256": sha_a, "text": "kernel A\n"}

        events, sources = read_jsonl(lines)
        assert events == log.events(run_id="r")
        assert [e.id for e in events] == sorted(e.id for e in events)
        assert sources == {sha_a: "kernel A\n", sha_b: "kernel B\n"}
        assert events[1].payload["max_rel_err"] == "Infinity" and events[1].key == "k0"

        assert log.export_jsonl("no-such-run", io.StringIO()) == 0
