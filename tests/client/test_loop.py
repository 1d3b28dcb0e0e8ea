"""The loop against the in-process MCP server: steps, budgets, the pinned block, stuck detection, done.

Each run here is driven by a scripted policy through a real MCP client (in memory), and its log is
checked with the same invariants as the restart tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from client.goal import goal_text
from client.policy import ToolCall, Turn, TurnContext, Usage
from client.run_projection import RunState
from state import EventLog
from tests.client.common import STARTER, Scripted, check_invariants, new_run, run_in_process


def _db(home: Path) -> Path:
    return home / "marathon.db"


def test_max_steps_ends_the_run_at_exactly_n_and_every_call_carries_its_id(tmp_path: Path) -> None:
    def turn(ctx: TurnContext) -> Turn:
        step = ctx.pinned["step"]
        calls = tuple(ToolCall(f"c{step}_{i}", "list_problems", {}) for i in range(3))  # 3 a turn: 7 is not a multiple
        return Turn("three at once", calls, usage=Usage(50, 5, 0.01))

    with EventLog(_db(tmp_path)) as log:
        new_run(log, "exact", 7)
    end, _ = run_in_process(tmp_path, "exact", Scripted(turn))
    assert end.state == "budget" and "step budget" in end.reason
    summary = check_invariants(_db(tmp_path), "exact", 7)
    assert summary["turns"] == 3  # 3 + 3 + 1: the last turn's extra calls were never planned
    with EventLog(_db(tmp_path)) as log:
        keys = [e.key for e in log.events(run_id="exact", kinds=["tool.intent"])]
        assert [k.split(":")[2] for k in keys] == [f"exact/{i}" for i in range(1, 8)]  # the call_id in _meta
        last = log.events(run_id="exact", kinds=["model.turn"])[-1].payload
        assert last["requested"] == 3 and len(last["calls"]) == 1
        state = RunState.load(log, "exact")
        assert state.spend.tokens_in == 150 and abs(state.spend.cost_usd - 0.03) < 1e-9


def test_first_message_verbatim_and_the_pinned_block_last_every_turn(tmp_path: Path) -> None:
    seen: list[TurnContext] = []

    def turn(ctx: TurnContext) -> Turn:
        seen.append(ctx)
        return Turn("a note", (ToolCall(f"n{len(seen)}", "note", {"text": f"strategy {len(seen)}: tried X",
                                                                 "problem": "softmax", "tags": ["strategy"]}),))

    with EventLog(_db(tmp_path)) as log:
        new_run(log, "pinned", 3, target_speedup=1.5, instructions="Prefer wide loads.")
        first = log.events(run_id="pinned", kinds=["run.start"])[0].payload["goal"]
    run_in_process(tmp_path, "pinned", Scripted(turn))
    assert len(seen) == 3
    for i, ctx in enumerate(seen):
        assert ctx.messages[0].role == "user" and ctx.messages[0].content == first
        pinned = ctx.messages[-1].content
        assert pinned.startswith("[pinned state") and "`softmax` at shape `bench`" in pinned
        assert "at least 1.5x" in pinned and f"step {i} of 3" in pinned
        assert pinned.count("- #") == i  # the notes ledger grows from the log, one note per step
        assert ctx.pinned["goal"]["target_speedup"] == 1.5
    assert "Prefer wide loads." in first and first == goal_text(RunState.load(EventLog(_db(tmp_path)), "pinned").goal)
    assert "strategy 2: tried X" in seen[2].messages[-1].content


def test_repeated_failures_of_one_class_are_named_in_the_pinned_block(tmp_path: Path) -> None:
    seen: list[str] = []

    def turn(ctx: TurnContext) -> Turn:
        seen.append(ctx.messages[-1].content)
        n = len(seen)
        return Turn("try", (ToolCall(f"k{n}", "compile", {"problem": "softmax",
                                                           "source": f"def entry(x):\n    return (x{n}\n"}),))

    with EventLog(_db(tmp_path)) as log:
        new_run(log, "stuck", 4)
    run_in_process(tmp_path, "stuck", Scripted(turn))
    assert "STUCK" not in seen[2]
    assert "STUCK: the last 3 attempts failed with syntax_error" in seen[3]
    assert "Failures by class: syntax_error 3" in seen[3]


@pytest.mark.slow
def test_a_source_already_profiled_is_answered_from_the_log(tmp_path: Path) -> None:
    respaced = "# the same kernel, other comments and spacing\n" + STARTER.replace("    x = x - ", "    x = x  -  ")
    calls = [ToolCall("p1", "profile", {"problem": "softmax", "source": STARTER}),
             ToolCall("p2", "profile", {"problem": "softmax", "source": respaced})]
    seen: list[TurnContext] = []

    def turn(ctx: TurnContext) -> Turn:
        seen.append(ctx)
        return Turn("profile", (calls[len(seen) - 1],))

    with EventLog(_db(tmp_path)) as log:
        new_run(log, "repeat", 2)
    run_in_process(tmp_path, "repeat", Scripted(turn))
    check_invariants(_db(tmp_path), "repeat", 2)
    with EventLog(_db(tmp_path)) as log:
        profiles = [e for e in log.events(run_id="repeat", kinds=["tool.intent"]) if e.payload["tool"] == "profile"]
        results = log.events(run_id="repeat", kinds=["agent.result"])
        state = RunState.load(log, "repeat")
        attempts = log.attempts(run_id="repeat")
    assert len(profiles) == 1  # the second never reached the server
    assert results[1].payload["status"] == "from_log" and "Already tried" in results[1].payload["text"]
    # Correct, not verified: a CPU check has no timing and no kernel census, so it is never a run's best.
    assert [(a["outcome"], a["verified"]) for a in attempts] == [("correct", False)]
    assert state.best is None


def test_done_is_decided_from_measured_numbers_in_the_log_not_from_a_claim(tmp_path: Path) -> None:
    """The policy claims the target; the run goes on. Neither another run's verified 10x nor an unverified
    10x of this run (as logged before attempts said how they were verified) stops it. A verified timed
    attempt of this run (as the server logs a GPU profile of it) reaches the target; the run stops at
    once, done."""
    seen = []

    def attempt(log: EventLog, run_id: str, speedup: float, **verdict: object) -> None:
        sha = log.put_source(STARTER.replace("NUM_WARPS = 8", f"NUM_WARPS = {len(seen)}"))
        log.append("attempt", {"problem": "softmax", "shape": "bench", "source_sha": sha, "tool": "profile",
                               "outcome": "correct", "device": "NVIDIA H200", "median_us": 64.0 / speedup,
                               "speedup": speedup, "baseline": "torch", "baseline_us": 64.0, **verdict},
                   run_id=run_id)

    def turn(ctx: TurnContext) -> Turn:
        seen.append(ctx)
        with EventLog(_db(tmp_path)) as log:
            if len(seen) == 2:
                attempt(log, "gpu-agent", 10.0, verified=True, verification="judge:v1+bounds")
                attempt(log, "target", 10.0)
            elif len(seen) == 3:
                attempt(log, "target", 9.0, verified=False, verification=None)
            elif len(seen) == 4:
                attempt(log, "target", 1.6, verified=True, verification="judge:v1+bounds")
        return Turn("Done: I reached 10x, the target is met.", (ToolCall(f"l{len(seen)}", "list_problems", {}),))

    with EventLog(_db(tmp_path)) as log:
        new_run(log, "target", 50, target_speedup=1.5)
    end, _ = run_in_process(tmp_path, "target", Scripted(turn))
    assert end.state == "done" and "1.6x reaches the target 1.5x" in end.reason
    assert len(seen) == 4  # not after the claims, nor after a 10x it did not own or nobody verified
    assert "Best in the whole log (any run; it does not count for this run's goal)" in seen[2].messages[-1].content
    assert "10x" in seen[2].messages[-1].content and "Target: not met yet." in seen[3].messages[-1].content


def test_a_model_that_stops_early_is_nudged_once_then_the_run_ends(tmp_path: Path) -> None:
    seen: list[TurnContext] = []

    def turn(ctx: TurnContext) -> Turn:
        seen.append(ctx)
        return Turn("I think this is enough.", ())

    policy = Scripted(turn, name="model-like")
    with EventLog(_db(tmp_path)) as log:
        new_run(log, "early", 10, target_speedup=2.0)
    end, _ = run_in_process(tmp_path, "early", policy)
    assert len(seen) == 2 and end.state == "done" and "policy finished" in end.reason
    assert "Keep going" in seen[1].messages[-2].content  # the nudge, before the pinned block


def test_resume_reloads_spend_and_a_finished_run_stays_finished(tmp_path: Path) -> None:
    def turn(ctx: TurnContext) -> Turn:
        return Turn("x", (ToolCall(f"b{ctx.pinned['step']}", "best", {"problem": "softmax"}),),
                    usage=Usage(1000, 100, 0.5))

    from client.goal import Budget, Goal
    from client.loop import start_run

    with EventLog(_db(tmp_path)) as log:
        start_run(log, "costly", Goal(problem="softmax", budget=Budget(cost_usd=1.2)), policy="scripted")
    run_in_process(tmp_path, "costly", Scripted(turn))
    with EventLog(_db(tmp_path)) as log:
        state = RunState.load(log, "costly")
    assert state.ended is not None and state.ended["state"] == "budget" and state.turns == 3  # 3 x $0.5 >= $1.2
    policy = Scripted(turn)
    end, _ = run_in_process(tmp_path, "costly", policy, resume=True)
    assert policy.calls == 0 and end.state == "budget"  # no refill: the first check stops it


def test_unknown_tools_and_bad_arguments_are_results_not_crashes(tmp_path: Path) -> None:
    script = iter([
        Turn("", (ToolCall("u", "no_such_tool", {}),)),
        Turn("", (ToolCall("b", "best", {"problem": "nope"}),)),
        Turn("", (ToolCall("r", "read_resource", {"uri": "problem://nope/starter"}),)),
    ])
    with EventLog(_db(tmp_path)) as log:
        new_run(log, "bad", 3)
    run_in_process(tmp_path, "bad", Scripted(lambda ctx: next(script)))
    with EventLog(_db(tmp_path)) as log:
        results = [e.payload for e in log.events(run_id="bad", kinds=["agent.result"])]
    assert [r["status"] for r in results] == ["client_error", "tool_error", "tool_error"]
    assert "unknown tool" in results[0]["text"] and "unknown problem" in results[1]["text"]
    assert not any(r["ok"] for r in results)
