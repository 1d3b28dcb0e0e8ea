"""Runs as `status`, `resume` and `report` see them: which exist, which is live, what state each is in,
and `status` itself: its JSON object and its text.

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

from client.run_projection import AttemptRec, RunState, fmt_us

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


def attempt_number(log: Any, state: RunState, rec: AttemptRec) -> int | None:
    """The attempt's number within its own run (1 = that run's first): from the run state for this run's
    attempts; for another run's, its place among that run's attempt events in the log."""
    if rec.run_id == state.run_id:
        return state.number_of(rec)
    if rec.run_id is None or rec.attempt_id is None:
        return None
    ids = sorted(a["id"] for a in log.attempts(run_id=rec.run_id, limit=None))
    return ids.index(rec.attempt_id) + 1 if rec.attempt_id in ids else None


def _best_data(log: Any, state: RunState, best: AttemptRec | None) -> dict[str, Any] | None:
    if best is None:
        return None
    return {"attempt_id": best.attempt_id, "attempt_number": attempt_number(log, state, best), "step": best.step,
            "run_id": best.run_id, "outcome": best.outcome, "median_us": best.median_us, "speedup": best.speedup,
            "max_rel_err": best.max_rel_err, "device": best.device, "verified": best.verified,
            "verification": best.verification}


def status_data(log: Any, run_id: str) -> dict[str, Any]:
    """The public `marathon status --json` object of one run.

    "best" is this run's own best verified attempt (what goal_met is decided from), "log_best" the best
    verified attempt of any run in the log (this run's too); each names its attempt by "attempt_id"
    (the event id) and "attempt_number" (its place among its own run's attempts, 1 = the first)."""
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
        "best": _best_data(log, state, state.best),
        "log_best": _best_data(log, state, state.log_best),
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


def _attempt_words(d: dict[str, Any], run_id: str, of: int | None = None) -> str:
    """A `best`/`log_best` object of status_data in words: its numbers, then which attempt it is."""
    nums = [d.get("outcome") or "?"]
    if d.get("median_us") is not None:
        nums.append(f"{fmt_us(d['median_us'])} us")
    if d.get("speedup") is not None:
        nums.append(f"{d['speedup']:.3g}x")
    n = d.get("attempt_number")
    own = d.get("run_id") == run_id
    which = ("attempt" if n is None else f"attempt {n}" + (f" of {of}" if own and of else "")) + (
        "" if own else f" of run {d.get('run_id') or '-'}")
    where = [which] + ([f"step {d['step']}"] if own and d.get("step") else [])
    where += [f"event #{d['attempt_id']}"] if d.get("attempt_id") is not None else []
    where += [d["device"]] if d.get("device") else []
    return f"{', '.join(nums)} ({', '.join(where)})"


def format_status(d: dict[str, Any]) -> str:
    """`marathon status` as people read it: the run's own best, and the whole log's beside it, labelled,
    when that is another attempt."""
    best, whole = d.get("best"), d.get("log_best")
    best_s = _attempt_words(best, d["run_id"], d.get("attempts")) if best else "none yet (no verified attempt)"
    end = f" ({d['end_state']}: {d['reason']})" if d.get("end_state") else ""
    spend = d.get("spend") or {}
    model = f" ({d['model']})" if d.get("model") else ""
    of = f" of {d['budget']['steps']}" if (d.get("budget") or {}).get("steps") else ""
    outcomes = ", ".join(f"{k} {v}" for k, v in (d.get("outcomes") or {}).items()) or "-"
    tokens = spend.get("tokens_in", 0) + spend.get("tokens_out", 0)
    lines = [f"run {d['run_id']}: {d['state']}{end}",
             f"  {d['problem']}/{d['shape']}, policy {d.get('policy')}{model}",
             f"  steps {d['steps']}{of}, turns {d['turns']}, attempts {d['attempts']}: {outcomes}",
             f"  best of this run: {best_s}"]
    if whole and whole.get("run_id") != d["run_id"]:
        lines.append(f"  best in the whole log: {_attempt_words(whole, d['run_id'])}")
    lines.append(f"  spent: {spend.get('active_s', 0) / 3600:.2f} h active, {tokens:,} tokens, "
                 f"${spend.get('cost_usd', 0):.2f}, {spend.get('compactions', 0)} compactions, "
                 f"{d.get('sessions', 1)} session(s)")
    if d["state"] == "interrupted":
        lines.append(f"  continue with: marathon resume {d['run_id']}")
    return "\n".join(lines)
