"""Shared pieces of the client tests (no tests here): scripted policies, an in-process server, invariants.

`child_run` is what a killed process runs in the restart tests: it is imported by a forkserver that
preloads this module (so each child starts in milliseconds, not seconds of imports) and drives a run
against an in-process server until the parent kills it with SIGKILL, or a hook kills it at a chosen
point of the loop.
"""

from __future__ import annotations

import functools
import os
import random
import signal
from pathlib import Path
from typing import Any

import anyio

from client.goal import Budget, Goal
from client.loop import Loop, LoopOptions, RunEnd, start_run
from client.mcp_link import Link, ServerSpec
from client.policy import ToolCall, Turn, TurnContext, Usage
from kernels import list_problems
from server.app import build_app
from server.service import Service
from state import EventLog

list_problems()  # loaded here, so a forkserver that preloads this module hands children a warm suite

ROOT = Path(__file__).resolve().parents[2]
STARTER = (ROOT / "kernels" / "softmax" / "starter.py").read_text()


class Scripted:
    """The few lines of a scripted policy these tests need: a function of the context, no copies kept."""

    def __init__(self, fn: Any, name: str = "scripted") -> None:
        self.fn = fn
        self.name = name
        self.calls = 0

    def next_turn(self, context: TurnContext) -> Turn:
        self.calls += 1
        turn: Turn = self.fn(context)
        return turn


def cycle_turn(context: TurnContext) -> Turn:
    """A deterministic turn from the step count alone, so a re-asked turn after a kill is the same turn.

    Cheap tools in a cycle, every fifth turn two calls at once; notes carry their step so a duplicate
    would show.
    """
    step = int(context.pinned["step"]) + 1
    kind = step % 6

    def call(i: int, name: str, args: dict[str, Any]) -> ToolCall:
        return ToolCall(f"t{step}_{i}", name, args)

    if kind == 0:
        calls = (call(0, "note", {"text": f"note for step {step}", "problem": "softmax", "tags": ["test"]}),
                 call(1, "attempts", {"problem": "softmax", "limit": 3}))
    elif kind == 1:
        calls = (call(0, "list_problems", {}),)
    elif kind == 2:
        calls = (call(0, "note", {"text": f"note for step {step}", "problem": "softmax"}),)
    elif kind == 3:
        calls = (call(0, "compile", {"problem": "softmax", "source": STARTER}),)
    elif kind == 4:
        calls = (call(0, "best", {"problem": "softmax"}),)
    else:
        calls = (call(0, "read_resource", {"uri": "problem://softmax/shapes"}),)
    return Turn(text=f"turn for step {step}", tool_calls=calls, usage=Usage(100, 20, 0.001), model="script")


def in_process(home: Path) -> tuple[Any, Any]:
    """(service, app): the MCP server in this process, on home/marathon.db."""
    service = Service(log=EventLog(home / "marathon.db"), cache_dir=home / "cache")
    return service, build_app(service, heartbeat_s=0.5)


async def drive(log: EventLog, spec: ServerSpec, policy: Any, run_id: str, *, options: LoopOptions | None = None,
                hook: Any = None, resume: bool = False, progress: Any = None) -> tuple[RunEnd, Loop]:
    link = Link(spec, run_id=run_id, backoff_s=0.05)
    try:
        await link.ensure()
        loop = Loop(log, link, policy, run_id, options=options, hook=hook, progress=progress)
        if resume:
            loop.mark_resumed()
        return await loop.run(), loop
    finally:
        await link.close()


def new_run(log: EventLog, run_id: str, steps: int, **goal: Any) -> None:
    start_run(log, run_id, Goal(problem="softmax", budget=Budget(steps=steps), **goal), policy="scripted")


def run_in_process(home: Path, run_id: str, policy: Any, *, resume: bool = False, options: LoopOptions | None = None,
                   hook: Any = None) -> tuple[RunEnd, Loop]:
    service, app = in_process(home)
    try:
        return anyio.run(functools.partial(drive, service.log, ServerSpec(app=app), policy, run_id, options=options,
                                           hook=hook, resume=resume))
    finally:
        service.close()


def child_run(home: str, run_id: str, kill_at_hook: int | None, seed: int) -> None:
    """Drive (or resume) a cycle_turn run; with kill_at_hook, SIGKILL this process at that hook call."""
    random.seed(seed)
    os.environ["MARATHON_HOME"] = home
    counter = {"n": 0}

    def hook(point: str) -> None:
        counter["n"] += 1
        if kill_at_hook is not None and counter["n"] >= kill_at_hook:
            os.kill(os.getpid(), signal.SIGKILL)

    with EventLog(Path(home) / "marathon.db") as log:
        resume = bool(log.events(run_id=run_id, kinds=["run.resume", "model.turn", "agent.call"], limit=1))
    run_in_process(Path(home), run_id, Scripted(cycle_turn), resume=resume, hook=hook)
    os._exit(0)


def check_invariants(db: Path, run_id: str, steps: int | None = None) -> dict[str, Any]:
    """The final log of a run: every intent has exactly one result, steps contiguous, nothing twice."""
    with EventLog(db) as log:
        ev = log.events(run_id=run_id)
        by_kind: dict[str, list[Any]] = {}
        for e in ev:
            by_kind.setdefault(e.kind, []).append(e)
        calls = [e.payload["step"] for e in by_kind.get("agent.call", [])]
        results = [e.payload["step"] for e in by_kind.get("agent.result", [])]
        assert len(calls) == len(set(calls)), "a step was started twice"
        assert len(results) == len(set(results)), "a step has two results"
        assert sorted(calls) == list(range(1, len(calls) + 1)), f"steps not contiguous: {sorted(calls)}"
        assert sorted(results) == sorted(calls), "a call without a result, or a result without a call"
        if steps is not None:
            assert len(calls) == steps, (len(calls), steps)
        turns = [e.payload["turn"] for e in by_kind.get("model.turn", [])]
        assert turns == list(range(1, len(turns) + 1)), "model turns not contiguous"
        planned = sorted(c["step"] for e in by_kind.get("model.turn", []) for c in e.payload["calls"])
        assert planned == sorted(calls), "a planned call never ran, or ran without a turn"
        for call_ev in by_kind.get("agent.call", []):  # each call's result comes after it
            res = next(r for r in by_kind["agent.result"] if r.payload["step"] == call_ev.payload["step"])
            assert res.id > call_ev.id
        # the server's side: every intent of the run has exactly one result, and one attempt at most
        intents = by_kind.get("tool.intent", [])
        server_results = [e.payload["intent_id"] for e in by_kind.get("tool.result", [])]
        assert len(server_results) == len(set(server_results)), "a server intent has two results"
        assert sorted(server_results) == sorted(e.id for e in intents), "a server intent without a result"
        attempts = [e.payload.get("intent_id") for e in by_kind.get("attempt", [])]
        assert len(attempts) == len(set(attempts)), "a call judged twice"
        # no side effect twice: each note text (it names its step) at most once
        texts = [e.payload["text"] for e in by_kind.get("note", [])]
        assert len(texts) == len(set(texts)), "a note landed twice"
        ends = by_kind.get("run.end", [])
        statuses: dict[str, int] = {}
        for r in by_kind.get("agent.result", []):
            statuses[r.payload["status"]] = statuses.get(r.payload["status"], 0) + 1
        return {"steps": len(calls), "turns": len(turns), "statuses": statuses, "notes": len(texts),
                "resumes": len(by_kind.get("run.resume", [])), "end": ends[-1].payload if ends else None}


def check_prefix(db: Path, run_id: str) -> int:
    """What must hold after any kill, before the resume: started steps contiguous, no step with two
    results, no result without its call, and at most the newest turn's calls still open. Returns the
    number of open calls."""
    with EventLog(db) as log:
        calls = [e.payload["step"] for e in log.events(run_id=run_id, kinds=["agent.call"])]
        results = [e.payload["step"] for e in log.events(run_id=run_id, kinds=["agent.result"])]
        turns = log.events(run_id=run_id, kinds=["model.turn"])
    assert sorted(calls) == list(range(1, len(calls) + 1)) and len(calls) == len(set(calls))
    assert len(results) == len(set(results)) and set(results) <= set(calls)
    open_steps = set(calls) - set(results)
    newest = {c["step"] for c in turns[-1].payload["calls"]} if turns else set()
    assert open_steps <= newest, (open_steps, newest)
    return len(open_steps)
