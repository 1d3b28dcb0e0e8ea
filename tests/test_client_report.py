"""`status` (running, interrupted, finished, failed, from the log and the run's lock) and `report`
(a PNG of best-so-far over time and steps, a Markdown summary), on runs built event by event."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from client.goal import Budget, Goal
from client.loop import start_run
from client.report import _metric, best_series, markdown, run_baseline_us, write_report
from client.runs import RunLock, liveness, status_data
from client.runstate import AttemptRec, RunState
from state import EventLog
from tests.test_client_common import ROOT, STARTER

SPEEDUPS = [None, 1.1, 0.9, None, 1.4, 1.3]  # None: a failed attempt


def _timed_run(log: EventLog, run_id: str) -> None:
    """A run as a GPU run logs it: profiles with times and speedups, a failure, a note."""
    start_run(log, run_id, Goal(problem="softmax", target_speedup=2.0, budget=Budget(steps=10)), policy="tuner")
    sha = log.put_source(STARTER)
    for step, speedup in enumerate(SPEEDUPS, start=1):
        args = {"problem": "softmax", "source": STARTER.replace("NUM_WARPS = 8", f"NUM_WARPS = {step}")}
        log.append("model.turn", {"turn": step, "text": f"tuner: try config {step}", "calls": [
            {"id": f"c{step}", "name": "profile", "step": step, "arguments": args}]}, run_id=run_id)
        log.append("agent.call", {"step": step, "call_id": f"{run_id}/{step}", "tool": "profile", "args": args},
                   run_id=run_id)
        ok = speedup is not None
        attempt = AttemptRec(tool="profile", outcome="correct" if ok else "incorrect", ts=0.0, step=step,
                             attempt_id=100 + step, median_us=64.0 / speedup if ok else None, speedup=speedup,
                             baseline="torch", baseline_us=64.0, device="NVIDIA H200", source_sha=sha,
                             error_class=None if ok else "incorrect", error=None if ok else "max rel err 3e-2",
                             verified=ok, verification="judge:v1+bounds" if ok else None)
        log.append("agent.result", {"step": step, "call_id": f"{run_id}/{step}", "tool": "profile", "ok": ok,
                                    "status": "ok" if ok else "tool_error", "text": "...",
                                    "attempt": attempt.as_dict()}, run_id=run_id)
    log.append("note", {"text": "wider rows per program helped", "problem": "softmax", "tags": ["strategy"]},
               run_id=run_id)


def test_status_tells_running_interrupted_finished_and_failed_apart(tmp_path: Path) -> None:
    db = tmp_path / "marathon.db"
    with EventLog(db) as log:
        for run_id in ("live", "stopped", "done", "broken"):
            start_run(log, run_id, Goal(problem="softmax"), policy="tuner")
        log.append("run.end", {"state": "budget", "reason": "the step budget is spent"}, run_id="done")
        log.append("run.end", {"state": "failed", "reason": "model error"}, run_id="broken")
        with RunLock(db, "live"):
            states = {r: status_data(log, r)["state"] for r in ("live", "stopped", "done", "broken")}
        assert status_data(log, "live")["state"] == "interrupted"  # the lock went with its holder
    assert states == {"live": "running", "stopped": "interrupted", "done": "finished", "broken": "failed"}


def test_status_json_of_a_run(tmp_path: Path) -> None:
    with EventLog(tmp_path / "marathon.db") as log:
        _timed_run(log, "timed")
        data = status_data(log, "timed")
    assert {"run_id", "state", "steps", "best"} <= set(data)
    assert data["steps"] == 6 and data["best"]["speedup"] == 1.4 and data["best"]["attempt_id"] == 105
    assert data["outcomes"] == {"correct": 4, "incorrect": 2} and data["goal_met"] is None
    env = {**os.environ, "MARATHON_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "client.cli", "status", "--json"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["run_id"] == "timed"
    human = subprocess.run([sys.executable, "-m", "client.cli", "status", "timed"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60).stdout
    assert "run timed: interrupted" in human and "marathon resume timed" in human and "1.4x" in human


def test_report_of_a_timed_run(tmp_path: Path) -> None:
    with EventLog(tmp_path / "marathon.db") as log:
        _timed_run(log, "timed")
        folder = write_report(log, "timed", tmp_path / "out")
        state = RunState.load(log, "timed")
        md = markdown(log, state)
    base = run_baseline_us(state.attempts)
    assert base == 64.0
    assert best_series(state.attempts, "speedup", None, base) == pytest.approx([None, 1.1, 1.1, 1.1, 1.4, 1.4])
    assert (folder / "progress.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / "progress.png").stat().st_size > 10_000
    assert "Baseline" in md and "torch: 64 us" in md
    assert "attempt #105 (step 5 of this run): correct, 45.71 us, 1.4x" in md
    assert "| 1 | profile | incorrect | - | - | tuner: try config 1 |" in md
    assert "| 2 | profile | correct | 58.18 | 1.1 | tuner: try config 2 |" in md
    assert "wider rows per program helped" in md and "- incorrect: 2" in md
    assert "NUM_WARPS = 5" in md  # the best kernel's source


def test_best_curve_uses_one_baseline_figure_and_never_falls() -> None:
    """A wandering baseline must not let a slower kernel's luckier ratio lower or raise the best curve."""
    def rec(step: int, us: float, base: float) -> AttemptRec:
        return AttemptRec(tool="profile", outcome="correct", ts=0.0, step=step, attempt_id=step, median_us=us,
                          speedup=base / us, baseline="torch", baseline_us=base, verified=True,
                          verification="judge:v1+bounds")

    attempts = [rec(1, 100.0, 30.0), rec(2, 99.0, 20.0), rec(3, 120.0, 60.0), rec(4, 50.0, 25.0)]
    assert _metric(attempts) == "speedup"
    # speedups logged without the baseline's time cannot be put on one scale: the plot falls back to time
    assert _metric([AttemptRec(**{**a.as_dict(), "baseline_us": None}) for a in attempts]) == "median_us"
    base = run_baseline_us(attempts)
    assert base == pytest.approx(27.5)
    series = best_series(attempts, "speedup", None, base)
    assert series == pytest.approx([0.275, 27.5 / 99, 27.5 / 99, 0.55])
    assert all(b >= a for a, b in itertools.pairwise(series))


@pytest.mark.parametrize("when", ["finished", "running"])
def test_resume_refuses_finished_and_running_runs(tmp_path: Path, when: str) -> None:
    db = tmp_path / "marathon.db"
    with EventLog(db) as log:
        start_run(log, "r", Goal(problem="softmax"), policy="tuner")
        if when == "finished":
            log.append("run.end", {"state": "done", "reason": "the goal is met"}, run_id="r")
    env = {**os.environ, "MARATHON_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    lock = RunLock(db, "r").acquire() if when == "running" else None
    try:
        out = subprocess.run([sys.executable, "-m", "client.cli", "resume", "r"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
    finally:
        if lock is not None:
            lock.release()
    if when == "finished":
        assert out.returncode == 0 and "nothing to resume" in out.stdout
    else:
        assert out.returncode == 1 and "running in another process" in out.stderr
    with EventLog(db) as log:
        assert liveness(db, RunState.load(log, "r")) == ("finished" if when == "finished" else "interrupted")
