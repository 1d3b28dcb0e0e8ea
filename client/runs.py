"""Runs as `status`, `resume` and `report` see them: which exist, which is live, what state each is in.

A run is "running" while a process holds its lock (an flock on state_dir/runs/RUN.lock, released
by the kernel however the process dies, kill -9 included, so a stale pid can never look alive);
"finished" or "failed" once its newest lifecycle event is a run.end; otherwise "interrupted":
its process is gone and `marathon resume RUN` continues it. For a run whose process is on another
host, the lock cannot be tested: it counts as running while its events are recent.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
import uuid
from pathlib import Path
from typing import IO, Any

from client.runstate import AttemptRec, RunState

REMOTE_LIVE_S = 900.0  # a run on another host counts as running while its newest event is this recent


class RunBusy(RuntimeError):
    """Another process is driving this run."""


def new_run_id(problem: str) -> str:
    return f"{problem}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def lock_path(db_path: Path, run_id: str) -> Path:
    return Path(db_path).parent / "runs" / f"{run_id}.lock"


class RunLock:
    """Held by the process driving a run, for as long as it drives it."""

    def __init__(self, db_path: Path, run_id: str) -> None:
        self.path = lock_path(db_path, run_id)
        self._fh: IO[str] | None = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            raise RunBusy(f"another process is driving this run (lock {self.path})") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()} {socket.gethostname()}\n")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_locked(db_path: Path, run_id: str) -> bool:
    path = lock_path(db_path, run_id)
    if not path.exists():
        return False
    with open(path, encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def process_identity() -> dict[str, Any]:
    """pid and host of this process, recorded in run.start and run.resume."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def liveness(db_path: Path, state: RunState, now: float | None = None) -> str:
    """running, interrupted, finished or failed."""
    if state.ended is not None:
        return "failed" if state.ended.get("state") == "failed" else "finished"
    last_host = (state.hosts[-1] if state.hosts else {}).get("host")
    if last_host in (None, socket.gethostname()):
        return "running" if is_locked(db_path, state.run_id) else "interrupted"
    return "running" if (now or time.time()) - state.last_ts < REMOTE_LIVE_S else "interrupted"


def client_runs(log: Any) -> list[dict[str, Any]]:
    """Runs started by the bundled client (those with a run.start), most recently active first."""
    return [r for r in log.runs() if r.get("goal") is not None]


def latest_run(log: Any) -> str | None:
    runs = client_runs(log)
    return runs[0]["run_id"] if runs else None


def _best_data(best: AttemptRec | None) -> dict[str, Any] | None:
    if best is None:
        return None
    return {"attempt_id": best.attempt_id, "step": best.step, "run_id": best.run_id, "outcome": best.outcome,
            "median_us": best.median_us, "speedup": best.speedup, "max_rel_err": best.max_rel_err,
            "device": best.device, "verified": best.verified, "verification": best.verification}


def status_data(log: Any, run_id: str) -> dict[str, Any]:
    """The public `marathon status --json` object of one run."""
    state = RunState.load(log, run_id)
    live = liveness(log.path, state)
    goal = state.goal
    assert goal is not None
    return {
        "run_id": run_id,
        "state": live,
        "end_state": (state.ended or {}).get("state"),
        "reason": (state.ended or {}).get("reason"),
        "problem": goal.problem,
        "shape": goal.shape,
        "policy": state.start.get("policy"),
        "model": state.start.get("model"),
        "steps": state.steps_done,
        "steps_started": state.steps_started,
        "turns": state.turns,
        "best": _best_data(state.best),  # this run's own best verified attempt: what goal_met is decided from
        "log_best": _best_data(state.log_best),  # the best verified attempt of any run in the log
        "target": {"speedup": goal.target_speedup, "median_us": goal.target_us},
        "goal_met": state.goal_met(),
        "attempts": len(state.attempts),
        "outcomes": dict(state.outcomes),
        "failures": dict(state.failures),
        "spend": {"tokens_in": state.spend.tokens_in, "tokens_out": state.spend.tokens_out,
                  "cost_usd": round(state.spend.cost_usd, 6), "active_s": round(state.active_seconds(), 1),
                  "compactions": state.spend.compactions, "model_errors": state.spend.model_errors},
        "budget": {k: v for k, v in goal.budget.__dict__.items()},
        "budget_left": state.budget_left(live=live == "running"),
        "sessions": len(state.sessions),
        "started": state.sessions[0][0] if state.sessions else None,
        "last_event_ts": state.last_ts,
        "pid": (state.hosts[-1] if state.hosts else {}).get("pid"),
        "host": (state.hosts[-1] if state.hosts else {}).get("host"),
    }
