"""The tuner: it reads TUNE_SPACE, rewrites only the declared constants, walks the space nearest-first,
never proposes a source already tried, and stops when the space is exhausted. End to end through
`marathon run` on the CPU (profile checks correctness under the interpreter, with no timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from client.fingerprint import attempt_key, fingerprint
from client.policy import Message, Turn, TurnContext
from client.runstate import AttemptRec
from client.tuner import TunerPolicy, neighbours, rewrite, tune_space
from kernels import problem_names, starter_path
from tests.test_client_common import ROOT, STARTER


@pytest.mark.parametrize("problem", problem_names())
def test_every_starter_declares_a_space_holding_its_own_values(problem: str) -> None:
    source = starter_path(problem).read_text()
    space, current = tune_space(source)
    assert space and set(current) == set(space)
    for name, value in current.items():
        assert value in space[name], (name, value)


def test_rewrite_changes_the_declared_constants_and_nothing_else() -> None:
    source = starter_path("mla_decode").read_text()
    space, current = tune_space(source)
    other = {name: values[-1] if values[-1] != current[name] else values[0] for name, values in space.items()}
    out = rewrite(source, other)
    assert tune_space(out) == (space, other)
    changed = [(a, b) for a, b in zip(source.splitlines(), out.splitlines()) if a != b]
    assert len(changed) == len(space) and len(out.splitlines()) == len(source.splitlines())
    assert all(b.split("=")[0] == a.split("=")[0] for a, b in changed)  # same names, new values
    assert "# cache tokens per loop step" in out  # trailing comments kept
    assert rewrite(out, current) == source and fingerprint(out) != fingerprint(source)


def test_neighbours_come_nearest_first_and_cover_the_space() -> None:
    space = {"A": [1, 2, 4], "B": [16, 32]}
    order = list(neighbours(space, {"A": 2, "B": 32}))
    assert order[0] == {"A": 2, "B": 32}
    assert {tuple(sorted(c.items())) for c in order[1:4]} == {(("A", 1), ("B", 32)), (("A", 4), ("B", 32)),
                                                             (("A", 2), ("B", 16))}
    assert len(order) == 6 and len({tuple(sorted(c.items())) for c in order}) == 6


def _ctx(pinned: dict[str, Any], messages: list[Message] | None = None) -> TurnContext:
    return TurnContext(system="", messages=messages or [Message("user", "goal")], tools=[], pinned=pinned)


def test_the_tuner_walks_the_whole_space_once_then_notes_and_stops() -> None:
    """Drive the tuner as the loop would: the starter as the newest tool result, tried keys growing."""
    tuner = TunerPolicy()
    goal = {"problem": "softmax", "shape": "bench"}
    tried: dict[str, AttemptRec] = {}
    pinned: dict[str, Any] = {"goal": goal, "best": None, "tried": tried, "notes": []}
    first = tuner.next_turn(_ctx(pinned))
    assert [c.name for c in first.tool_calls] == ["best"]
    second = tuner.next_turn(_ctx(pinned, [Message("tool", '{"found": false}', tool_call_id=first.tool_calls[0].id)]))
    assert [(c.name, c.arguments) for c in second.tool_calls] == [("read_resource", {"uri": "problem://softmax/starter"})]
    messages = [Message("tool", STARTER, tool_call_id=second.tool_calls[0].id)]
    proposed = []
    while True:
        turn: Turn = tuner.next_turn(_ctx(pinned, messages))
        if not turn.tool_calls or turn.tool_calls[0].name != "profile":
            break
        source = turn.tool_calls[0].arguments["source"]
        proposed.append(tune_space(source)[1]["NUM_WARPS"])
        key = attempt_key("profile", turn.tool_calls[0].arguments)
        assert key is not None and key not in tried
        tried[key] = AttemptRec(tool="profile", outcome="correct", ts=0.0)
    assert proposed[0] == 8 and sorted(proposed) == [1, 2, 4, 8, 16, 32]  # the starter as it is, first
    assert turn.tool_calls[0].name == "note" and "searched all 6 configurations" in turn.tool_calls[0].arguments["text"]
    last = tuner.next_turn(_ctx(pinned, messages))
    assert not last.tool_calls and "tried" in last.text


def test_a_fresh_tuner_skips_what_the_log_has_tried() -> None:
    tried = {}
    space, _ = tune_space(STARTER)
    for warps in space["NUM_WARPS"][:-1]:
        source = rewrite(STARTER, {"NUM_WARPS": warps})
        key = attempt_key("profile", {"problem": "softmax", "shape": "bench", "source": source})
        assert key is not None
        tried[key] = AttemptRec(tool="profile", outcome="correct", ts=0.0)
    pinned = {"goal": {"problem": "softmax", "shape": "bench"}, "tried": tried, "notes": [],
              "best": {"outcome": "correct", "source": STARTER}}
    turn = TunerPolicy().next_turn(_ctx(pinned))
    assert turn.tool_calls[0].name == "profile"
    assert tune_space(turn.tool_calls[0].arguments["source"])[1] == {"NUM_WARPS": space["NUM_WARPS"][-1]}


def test_nothing_to_tune_ends_the_run() -> None:
    pinned = {"goal": {"problem": "softmax", "shape": "bench"}, "tried": {}, "notes": [],
              "best": {"outcome": "correct", "source": "def entry(x):\n    return x\n"}}
    turn = TunerPolicy().next_turn(_ctx(pinned))
    assert not turn.tool_calls and "nothing to tune" in turn.text


def _marathon(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MARATHON_HOME": str(home), "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "client.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_marathon_run_with_the_tuner_end_to_end_on_cpu(tmp_path: Path) -> None:
    """The README's main job: a short tuner run that ends with a report; then a second run that finds the
    space already tried in the log, records that, and stops instead of profiling anything again."""
    out = _marathon(tmp_path, "run", "--problem", "softmax", "--policy", "tuner", "--max-steps", "8",
                    "--report", str(tmp_path / "report"), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["state"] == "finished" and data["end_state"] == "budget" and data["steps"] == 8
    # Correct on the CPU, but not verified (no timing, no kernel census there): a CPU run has no best.
    assert data["best"] is None and data["outcomes"] == {"correct": 6}
    assert (tmp_path / "report" / "progress.png").read_bytes()[:4] == b"\x89PNG"
    md = (tmp_path / "report" / "report.md").read_text()
    for part in ("## Goal", "## Baseline", "## Best kernel", "## Strategies tried", "NUM_WARPS"):
        assert part in md
    lines = [line for line in out.stderr.splitlines() if line.startswith("step ")]
    assert len(lines) == 8 and lines[-1].startswith("step 8/8") and "left 0 steps" in lines[-1]

    again = _marathon(tmp_path, "run", "--problem", "softmax", "--max-steps", "20", "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads(again.stdout)
    # No verified best on the CPU: it reads the best (none), then the starter, then notes that all is tried.
    assert second["end_state"] == "done" and second["steps"] <= 3 and second["attempts"] == 0, second
    status = json.loads(_marathon(tmp_path, "status", "--json").stdout)
    assert status["run_id"] == second["run_id"] and status["state"] == "finished"
