"""The loop driven by a real model provider (Anthropic Messages) against a scripted model server.

What the model is sent must be a valid conversation whatever the loop adds: the first user message
verbatim, tool results answering each tool_use, the pinned block last; a turn without a tool call is
answered with one nudge, then ends the run; a provider error that is not retryable fails the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client.providers import make_provider
from state import EventLog
from tests.client.common import check_invariants, new_run, run_in_process
from tests.client.fake_openai_server import FakeModelServer, anthropic_message, error_reply


def _provider(fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-real")
    return make_provider("anthropic", "fake-claude", base_url=fake.anthropic_base_url, max_retries=0)


def test_a_model_run_sends_a_valid_conversation_every_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    replies = [anthropic_message("Let me look.", [("tu_1", "list_problems", {})], input_tokens=900),
               anthropic_message(None, [("tu_2", "note", {"text": "softmax is bandwidth-bound", "problem": "softmax"}),
                                        ("tu_3", "best", {"problem": "softmax"})], input_tokens=1200),
               anthropic_message("I am done.", input_tokens=1500),
               anthropic_message("Really done.", input_tokens=1600, output_tokens=7)]
    with FakeModelServer(replies) as fake, EventLog(tmp_path / "marathon.db") as log:
        new_run(log, "model", 20, target_speedup=2.0)
        first = log.events(run_id="model", kinds=["run.start"])[0].payload["goal"]
        end, _ = run_in_process(tmp_path, "model", _provider(fake, monkeypatch))
        bodies = [r.json for r in fake.requests]
    assert end.state == "done" and "Really done." in end.reason
    assert len(bodies) == 4
    summary = check_invariants(tmp_path / "marathon.db", "model", 3)
    assert summary["statuses"] == {"ok": 3} and summary["notes"] == 1
    for body in bodies:
        msgs = body["messages"]
        assert msgs[0]["role"] == "user" and msgs[0]["content"][0] == {"type": "text", "text": first}
        assert [m["role"] for m in msgs] == ["user", "assistant"] * (len(msgs) // 2) + ["user"] * (len(msgs) % 2)
        last = msgs[-1]["content"]
        assert last[-1]["type"] == "text" and last[-1]["text"].startswith("[pinned state")
        uses = [b["id"] for m in msgs if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for m in msgs if m["role"] == "user" for b in m["content"]
                   if b["type"] == "tool_result"]
        assert uses == results  # every tool_use answered, in order
        assert {t["name"] for t in body["tools"]} >= {"profile", "compile", "note", "read_resource"}
    assert "Keep going" in str(bodies[3]["messages"][-1])  # the nudge after the first stop
    with EventLog(tmp_path / "marathon.db") as log:
        turns = [e.payload for e in log.events(run_id="model", kinds=["model.turn"])]
    assert [t["usage"]["input_tokens"] for t in turns] == [900, 1200, 1500, 1600]


def test_a_provider_error_that_is_not_retryable_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeModelServer([error_reply(400, "bad request", anthropic=True)]) as fake, \
            EventLog(tmp_path / "marathon.db") as log:
        new_run(log, "broken", 5)
        end, _ = run_in_process(tmp_path, "broken", _provider(fake, monkeypatch))
        errors = log.events(run_id="broken", kinds=["model.error"])
        ends = log.events(run_id="broken", kinds=["run.end"])
    assert end.state == "failed" and len(errors) == 1 and not errors[0].payload["retryable"]
    assert ends[-1].payload["state"] == "failed"
