"""Restart-proof: kill -9 a scripted run at random points, twenty times, resume it each time, and check
that the final log holds every step exactly once with exactly one result, nothing done twice, and the
step budget spent exactly (not refilled by the restarts).

The killed process is the client with the MCP server in it (the in-process server), so a kill lands
anywhere: in the loop, in a commit, or half-way through a tool call on the server's side. Children
are forked from a forkserver that has the modules loaded, so twenty kills take seconds, not minutes.
A smaller test does the same through a real `marathon serve` stdio subprocess.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from client.mcp_link import Link, ServerSpec
from client.run_projection import RunState
from client.run_status import RunLock, is_locked, liveness
from state import EventLog
from tests.client.common import (
    ROOT,
    STARTER,
    Scripted,
    check_invariants,
    check_prefix,
    in_process,
    new_run,
    run_in_process,
)

STEPS = 500  # about 4 ms a step here: the kills spread over the whole run
KILLS = 20


@pytest.fixture(scope="module")
def forkserver() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.client.common"])
    return ctx


def _warm_compile_cache(home: Path) -> None:
    """One compile of the starter, so the runs' compile calls are cache hits (cheap and fast)."""
    service, _ = in_process(home)
    try:
        service.compile("softmax", STARTER, "bench", run_id="warm-up")
    finally:
        service.close()


def _child(ctx: Any, home: Path, run_id: str, kill_at_hook: int | None, seed: int) -> Any:
    from tests.client.common import child_run

    proc = ctx.Process(target=child_run, args=(str(home), run_id, kill_at_hook, seed))
    proc.start()
    return proc


def _resumes(db: Path, run_id: str) -> int:
    with EventLog(db) as log:
        return len(log.events(run_id=run_id, kinds=["run.resume"]))


def _wait_for_resume(db: Path, run_id: str, before: int, proc: Any, timeout_s: float = 60.0) -> None:
    """Until the run holds more than `before` run.resume events (the child has started its session), or the child
    has ended."""
    deadline = time.monotonic() + timeout_s
    while proc.is_alive() and time.monotonic() < deadline and _resumes(db, run_id) <= before:
        time.sleep(0.01)


def test_kill_nine_twenty_times_then_resume_to_the_same_invariants(tmp_path: Path, forkserver: Any) -> None:
    home = tmp_path
    db = home / "marathon.db"
    _warm_compile_cache(home)
    with EventLog(db) as log:
        new_run(log, "killed", STEPS)
    rng = random.Random(1234)
    landed = {"hook": 0, "timer": 0}
    progress = []
    dangling = 0  # calls left open by the kills, each settled by the next resume
    for i in range(KILLS):
        by_hook = i % 2 == 0
        resumed = _resumes(db, "killed")
        proc = _child(forkserver, home, "killed", rng.randint(1, 40) if by_hook else None, i)
        if by_hook:
            proc.join(60)
        else:
            # The kill lands in the middle of the run, not in the child's start-up: a loaded machine can take longer
            # than any fixed delay to import and reach run.resume.
            _wait_for_resume(db, "killed", resumed, proc)
            time.sleep(rng.uniform(0.08, 0.3))
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
            proc.join(60)
        assert proc.exitcode is not None, "a child did not stop"
        if proc.exitcode == -signal.SIGKILL:
            landed["hook" if by_hook else "timer"] += 1
        dangling += check_prefix(db, "killed")
        with EventLog(db) as log:
            state = RunState.load(log, "killed")
            progress.append(state.steps_done)
            assert liveness(db, state) in ("interrupted", "finished")  # a killed process never looks alive
    assert landed["hook"] == KILLS // 2 and landed["timer"] >= KILLS // 2 - 2, landed
    assert progress[-1] < STEPS, "the kills came too late to interrupt the run"
    final = _child(forkserver, home, "killed", None, 99)
    final.join(120)
    assert final.exitcode == 0
    summary = check_invariants(db, "killed", STEPS)
    assert summary["end"]["state"] == "budget"
    print(f"kills that landed: {landed}; steps done after each kill: {progress}; calls left open: {dangling}; "
          f"{summary}")
    assert dangling >= 3  # the kills did land in the middle of calls
    assert summary["resumes"] == KILLS  # every child but the first (which started the run) resumed it, the last too
    assert progress == sorted(progress), "a resume lost committed steps"
    with EventLog(db) as log:
        state = RunState.load(log, "killed")
        assert state.spend.tokens_in == 100 * state.turns  # spend reloaded from the log, never reset
        assert liveness(db, state) == "finished"


def test_dangling_note_that_landed_is_recovered_not_repeated(tmp_path: Path) -> None:
    """The server ran a note and logged its result; the client died before its agent.result."""
    import anyio

    from client.policy import ToolCall, Turn

    home = tmp_path
    with EventLog(home / "marathon.db") as log:
        new_run(log, "landed", 1)
        turn = {"turn": 1, "text": "note it", "calls": [{"id": "n1", "name": "note", "step": 1,
                                                         "arguments": {"text": "only once"}}]}
        log.append("model.turn", turn, run_id="landed")
        log.append("agent.call", {"step": 1, "call_id": "landed/1", "tool": "note", "args": {"text": "only once"},
                                  "turn": 1, "id": "n1"}, run_id="landed")
    service, app = in_process(home)

    async def send() -> None:
        async with Link(ServerSpec(app=app), run_id="landed") as link:
            await link.call("note", {"text": "only once"}, call_id="landed/1", timeout=30)

    anyio.run(send)
    service.close()
    end, _ = run_in_process(home, "landed", Scripted(lambda ctx: Turn("unused", (ToolCall("x", "note", {}),))),
                            resume=True)
    assert end.state == "budget"
    summary = check_invariants(home / "marathon.db", "landed", 1)
    assert summary["statuses"] == {"recovered": 1} and summary["notes"] == 1


def test_dangling_note_without_a_trace_is_closed_as_interrupted(tmp_path: Path) -> None:
    from client.policy import Turn

    home = tmp_path
    with EventLog(home / "marathon.db") as log:
        new_run(log, "lost", 2)
        log.append("model.turn", {"turn": 1, "text": "", "calls": [
            {"id": "n1", "name": "note", "step": 1, "arguments": {"text": "maybe"}},
            {"id": "b1", "name": "best", "step": 2, "arguments": {"problem": "softmax"}}]}, run_id="lost")
        log.append("agent.call", {"step": 1, "call_id": "lost/1", "tool": "note", "args": {"text": "maybe"}},
                   run_id="lost")
    policy = Scripted(lambda ctx: Turn("stop"))
    end, loop = run_in_process(home, "lost", policy, resume=True)
    summary = check_invariants(home / "marathon.db", "lost", 2)
    assert summary["statuses"] == {"interrupted": 1, "ok": 1}  # the note closed; the turn's unstarted call ran
    assert summary["notes"] == 0 and policy.calls == 0 and end.state == "budget"
    tool_msgs = [m for e in loop.transcript.entries for m in e.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_msgs] == ["n1", "b1"] and "interrupted" in tool_msgs[0].content


def test_dangling_note_written_without_its_result_is_read_back(tmp_path: Path) -> None:
    """The server wrote the note, then the run died before the server logged its tool.result: the note keeps its
    intent's id, so the resumed client reads it back instead of closing it as interrupted (and the model being
    told to note it again, twice in the log)."""
    from client.policy import ToolCall, Turn

    home = tmp_path
    args = {"text": "only once", "problem": None, "shape": None, "tags": None}
    with EventLog(home / "marathon.db") as log:
        new_run(log, "half", 1)
        log.append("model.turn", {"turn": 1, "text": "note it", "calls": [
            {"id": "n1", "name": "note", "step": 1, "arguments": {"text": "only once"}}]}, run_id="half")
        log.append("agent.call", {"step": 1, "call_id": "half/1", "tool": "note", "args": {"text": "only once"},
                                  "turn": 1, "id": "n1"}, run_id="half")
    service, _ = in_process(home)
    intent = service._intent("note", args, "half", None, "half/1")
    service.note("only once", run_id="half", intent_id=intent.id)  # ... and no tool.result: the crash
    service.close()
    end, _ = run_in_process(home, "half", Scripted(lambda ctx: Turn("unused", (ToolCall("x", "note", {}),))),
                            resume=True)
    assert end.state == "budget"
    summary = check_invariants(home / "marathon.db", "half", 1)
    assert summary["statuses"] == {"recovered": 1} and summary["notes"] == 1


def test_dangling_note_that_never_reached_a_sharing_server_is_sent(tmp_path: Path) -> None:
    """The client logged the call and died before the server received it; the server shares the log and has
    no intent for it, so the note was never made: the resumed client sends it (once)."""
    from client.policy import Turn

    home = tmp_path
    with EventLog(home / "marathon.db") as log:
        new_run(log, "unsent", 2)
        log.append("model.turn", {"turn": 1, "text": "", "calls": [
            {"id": "b1", "name": "best", "step": 1, "arguments": {"problem": "softmax"}},
            {"id": "n1", "name": "note", "step": 2, "arguments": {"text": "once"}}]}, run_id="unsent")
        log.append("agent.call", {"step": 1, "call_id": "unsent/1", "tool": "best", "args": {"problem": "softmax"},
                                  "turn": 1, "id": "b1"}, run_id="unsent")
    service, _ = in_process(home)
    # The first call did reach the server (so the log is known to be shared); the note's never did.
    service.record("best", {"problem": "softmax"}, lambda: service.best("softmax"), run_id="unsent",
                   call_id="unsent/1")
    service.close()
    with EventLog(home / "marathon.db") as log:
        log.append("agent.call", {"step": 2, "call_id": "unsent/2", "tool": "note", "args": {"text": "once"},
                                  "turn": 1, "id": "n1"}, run_id="unsent")
    end, _ = run_in_process(home, "unsent", Scripted(lambda ctx: Turn("stop")), resume=True)
    summary = check_invariants(home / "marathon.db", "unsent", 2)
    assert end.state == "budget"
    assert summary["notes"] == 1 and "interrupted" not in summary["statuses"], summary


def test_a_run_cannot_be_driven_twice_at_once(tmp_path: Path) -> None:
    db = tmp_path / "marathon.db"
    with RunLock(db, "busy"):
        assert is_locked(db, "busy")
        with pytest.raises(RuntimeError, match="another process"):
            RunLock(db, "busy").acquire()
    assert not is_locked(db, "busy")


@pytest.mark.slow
def test_kill_nine_against_a_real_stdio_server(tmp_path: Path) -> None:
    """The CLI-like path: a client process spawning `marathon serve`, killed three times, then resumed."""
    env = {**os.environ, "MARATHON_HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    script = ("import sys, anyio, functools\n"
              "from pathlib import Path\n"
              "from state import EventLog\n"
              "from client.mcp_link import ServerSpec, server_env\n"
              "from tests.client.common import Scripted, cycle_turn, drive, new_run\n"
              "log = EventLog()\n"
              "resume = bool(log.events(run_id='stdio', kinds=['run.start'], limit=1))\n"
              "if not resume: new_run(log, 'stdio', 300)\n"
              "home = Path(sys.argv[1])\n"
              "spec = ServerSpec(env=server_env('stdio', home), errlog=home / 'serve.err')\n"
              "go = functools.partial(drive, log, spec, Scripted(cycle_turn), 'stdio', resume=resume)\n"
              "end, loop = anyio.run(go)\n"
              "print(end.state)\n")
    rng = random.Random(7)
    db = tmp_path / "marathon.db"
    done_before = 0
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _steps_done(db) <= done_before:  # until it makes progress
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.1))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done_before = _steps_done(db)
    assert 0 < done_before < 300
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "budget"
    summary = check_invariants(tmp_path / "marathon.db", "stdio", 300)
    assert summary["resumes"] == 3
    status = subprocess.run([sys.executable, "-m", "cli", "status", "stdio", "--json"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    data = json.loads(status.stdout)
    assert data["state"] == "finished" and data["steps"] == 300


def _steps_done(db: Path) -> int:
    if not db.exists():
        return 0
    with EventLog(db) as log:
        return len(log.events(run_id="stdio", kinds=["agent.result"]))
