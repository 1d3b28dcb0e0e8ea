"""The bundled client's best and goal: this run's own verified attempts only. A result the judge did not
vouch for (no `verified: true`, as every result before the field) never meets a goal, whatever its
speedup; another run's attempt is shown as the log's best, labelled, and never meets this run's goal;
a resumed run rebuilds the same best."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from client.goal import Budget, Goal
from client.loop import start_run
from client.pinned import pinned_dict, pinned_text
from client.recovery import attempt_report
from client.run_projection import AttemptRec, RunState, attempt_from_result
from client.run_status import status_data
from state import Event, EventLog
from tests.client.common import STARTER

JUDGED = {"verified": True, "verification": "judge:v1+bounds"}
RUN = "mine"


def _source(step: int) -> str:
    return STARTER.replace("NUM_WARPS = 8", f"NUM_WARPS = {step}")


def _report(step: int, speedup: float, sha: str | None, attempt_id: int | None, **verdict: Any) -> dict[str, Any]:
    """A profile's structured result, as the server returns it."""
    return {"problem": "softmax", "shape": "bench", "ok": True, "correct": True, "error_class": None,
            "max_rel_err": 1e-6, "speedup": speedup, "timing": {"median_us": 64.0 / speedup},
            "baseline": {"name": "torch", "median_us": 64.0}, "device": {"name": "NVIDIA H200"},
            "source_sha": sha, "attempt_id": attempt_id, **verdict}


class Run:
    """Builds a run event by event the way the loop and the server write it, folding each event into a
    live RunState in the order the loop sees it: its own events as it commits them, the server's attempt
    events at the next poll."""

    def __init__(self, log: EventLog, goal: Goal) -> None:
        self.log = log
        self.live = RunState(RUN, source_of=log.source)
        self.live.fold(start_run(log, RUN, goal, policy="scripted"))
        self.live.poll(log)
        self.step = 0

    def profile(self, speedup: float, *, server: dict[str, Any] | None = None,
                report: dict[str, Any] | None = None) -> Event:
        """One profile step: the server's attempt event (with `server` as its verdict fields; None: the server
        does not share the log), then the client's agent.result with `report` as the structured verdict."""
        self.step += 1
        source = _source(self.step)
        args = {"problem": "softmax", "shape": "bench", "source": source}
        call = self.log.append("agent.call", {"step": self.step, "call_id": f"{RUN}/{self.step}", "tool": "profile",
                                              "args": args}, run_id=RUN)
        self.live.fold(call)
        sha = self.log.put_source(source)
        attempt_id = None
        if server is not None:
            attempt_id = self.log.append("attempt", {
                "problem": "softmax", "shape": "bench", "source_sha": sha, "tool": "profile", "outcome": "correct",
                "device": "NVIDIA H200", "median_us": 64.0 / speedup, "speedup": speedup, "baseline": "torch",
                "baseline_us": 64.0, **server}, run_id=RUN).id
        structured = _report(self.step, speedup, sha, attempt_id, **(report or {}))
        rec = attempt_from_result("profile", args, structured, ts=0.0, step=self.step, fp=None)
        assert rec is not None
        result = self.log.append("agent.result", {
            "step": self.step, "call_id": f"{RUN}/{self.step}", "tool": "profile", "ok": True, "status": "ok",
            "text": "...", "structured": structured, "attempt": rec.as_dict()}, run_id=RUN)
        self.live.fold(result)
        self.live.poll(self.log)
        return result

    def foreign(self, run_id: str, speedup: float, **verdict: Any) -> int:
        sha = self.log.put_source(_source(100 + int(speedup)))
        ev = self.log.append("attempt", {
            "problem": "softmax", "shape": "bench", "source_sha": sha, "tool": "profile", "outcome": "correct",
            "device": "NVIDIA H200", "median_us": 64.0 / speedup, "speedup": speedup, **verdict}, run_id=run_id)
        self.live.poll(self.log)
        return ev.id


def _goal(target: float = 2.0) -> Goal:
    return Goal(problem="softmax", target_speedup=target, budget=Budget(steps=20))


def _ident(rec: AttemptRec | None) -> tuple[Any, ...] | None:
    if rec is None:
        return None
    return (rec.attempt_id, rec.step, rec.run_id, rec.speedup, rec.verified, rec.verification)


def test_an_unverified_result_never_meets_the_goal_whatever_its_speedup(tmp_path: Path) -> None:
    with EventLog(tmp_path / "m.db") as log:
        run = Run(log, _goal(2.0))
        run.profile(1000.0)  # a remote server's result from before the field: no verdict at all
        run.profile(500.0, report={"verified": False, "verification": None})
        run.profile(400.0, report={"verified": "true", "verification": "judge:v1"})  # not a JSON true
        assert run.live.best is None and run.live.goal_met() is None
        assert [a.verified for a in run.live.attempts] == [False, False, False]
        assert "none yet in this run" in pinned_text(run.live) and "Target: not met yet." in pinned_text(run.live)
        run.profile(2.5, report=JUDGED)
        assert run.live.best is not None and run.live.best.step == 4
        assert run.live.goal_met() == "measured speedup 2.5x reaches the target 2x"
        assert RunState.load(log, RUN).goal_met() == run.live.goal_met()


def test_an_unverified_fast_attempt_loses_to_a_slower_verified_one(tmp_path: Path) -> None:
    with EventLog(tmp_path / "m.db") as log:
        run = Run(log, _goal(100.0))
        run.profile(1.2, server=JUDGED, report=JUDGED)
        run.profile(50.0, server={}, report={})  # logged the old way on both sides
        run.profile(40.0, server={"verified": False, "verification": None}, report={"verified": False})
        run.profile(1.5, server=JUDGED, report=JUDGED)
        for state in (run.live, RunState.load(log, RUN)):
            assert state.best is not None and state.best.step == 4 and state.best.speedup == 1.5
            assert state.log_best is state.best and state.goal_met() is None
            assert state.best_source == _source(4)
        assert log.best("softmax", "bench")["speedup"] == 1.5  # type: ignore[index]


def test_the_best_and_the_goal_are_this_runs_own(tmp_path: Path) -> None:
    with EventLog(tmp_path / "m.db") as log:
        run = Run(log, _goal(3.0))
        theirs = run.foreign("theirs", 10.0, **JUDGED)  # verified, and past the target, but another run's
        run.foreign("old", 20.0)  # another run's, logged before `verified`: not even the log's best
        state = run.live
        assert state.best is None and state.goal_met() is None
        assert state.log_best is not None and state.log_best.attempt_id == theirs and state.first_best is state.log_best
        text = pinned_text(state)
        assert "Best so far in this run (verified; the goal is checked against it): none yet" in text
        assert f"Best in the whole log (any run; it does not count for this run's goal): attempt #{theirs} (run " \
               "theirs)" in text and "10x" in text and "Target: not met yet." in text
        data = pinned_dict(state)
        assert data["run_best"] is None and data["goal_met"] is None
        assert data["best"]["scope"] == "log" and data["best"]["attempt_id"] == theirs  # the kernel to build on
        assert data["log_best"]["source"] == _source(110)

        run.profile(2.0, server=JUDGED, report=JUDGED)
        state = run.live
        assert state.best is not None and state.best.step == 1 and state.log_best.attempt_id == theirs  # type: ignore[union-attr]
        assert state.goal_met() is None
        data = pinned_dict(state)
        assert data["best"]["scope"] == "run" and data["run_best"]["step"] == 1 and data["log_best"]["speedup"] == 10.0
        status = status_data(log, RUN)
        assert status["best"]["step"] == 1 and status["best"]["verified"] is True
        assert status["best"]["verification"] == "judge:v1+bounds"
        assert status["log_best"]["run_id"] == "theirs" and status["goal_met"] is None
        assert log.best("softmax", "bench", run_id=RUN)["speedup"] == 2.0  # type: ignore[index]

        run.profile(3.5, server=JUDGED, report=JUDGED)
        assert run.live.goal_met() == "measured speedup 3.5x reaches the target 3x"
        assert "Best in the whole log" in pinned_text(run.live)  # 10x elsewhere, still shown beside


def test_a_resumed_run_rebuilds_the_same_best(tmp_path: Path) -> None:
    with EventLog(tmp_path / "m.db") as log:
        run = Run(log, _goal(50.0))
        run.foreign("theirs", 4.0, **JUDGED)
        run.profile(1.1, server=JUDGED, report=JUDGED)
        run.profile(3.0, server=JUDGED)  # the result did not carry the verdict; the server's attempt event did
        run.profile(9.0, server={})  # neither said verified
        run.profile(2.0, report=JUDGED)  # a server that does not share the log
        run.profile(5.0)  # nothing verified, nothing logged by the server
        live = run.live
        loaded = RunState.load(log, RUN)
        assert _ident(live.best) == _ident(loaded.best)
        assert _ident(live.log_best) == _ident(loaded.log_best) and _ident(live.first_best) == _ident(loaded.first_best)
        assert live.best is not None and live.best.step == 2 and live.best.speedup == 3.0 and live.best.verified
        assert live.log_best is not None and live.log_best.run_id == "theirs"
        assert live.best_source == loaded.best_source == _source(2)
        assert pinned_text(live) == pinned_text(loaded)


def test_an_old_run_without_verdicts_is_read_back_unverified(tmp_path: Path) -> None:
    """A run recorded before the field: its agent.result attempts and the server's attempt events lack it."""
    with EventLog(tmp_path / "m.db") as log:
        run = Run(log, _goal(1.5))
        run.profile(8.0, server={}, report={})
        state = RunState.load(log, RUN)
        assert [a.verified for a in state.attempts] == [False]
        assert state.best is None and state.log_best is None and state.goal_met() is None
        assert status_data(log, RUN)["best"] is None


def test_a_verdict_recovered_from_the_attempt_event_carries_verified(tmp_path: Path) -> None:
    with EventLog(tmp_path / "m.db") as log:
        sha = log.put_source(STARTER)
        base = {"problem": "softmax", "shape": "bench", "source_sha": sha, "tool": "profile", "outcome": "correct",
                "device": "NVIDIA H200", "median_us": 20.0, "speedup": 3.2}
        judged = log.append("attempt", {**base, **JUDGED}, run_id=RUN)
        old = log.append("attempt", base, run_id=RUN)
    report = attempt_report(judged)
    assert report["verified"] is True and report["verification"] == "judge:v1+bounds"
    assert attempt_report(old)["verified"] is False and attempt_report(old)["verification"] is None
    rec = attempt_from_result("profile", {"problem": "softmax", "source": STARTER}, report, ts=0.0, step=1, fp=None)
    assert rec is not None and rec.verified and rec.verification == "judge:v1+bounds"


def test_a_tool_result_may_say_how_in_an_object() -> None:
    args = {"problem": "softmax", "source": STARTER}
    structured = _report(1, 2.0, "s", 7, verified=True, verification={"by": "judge:v1+bounds", "checked_calls": 9})
    rec = attempt_from_result("profile", args, structured, ts=0.0, step=1, fp=None)
    assert rec is not None and rec.verified and rec.verification == "judge:v1+bounds"
    odd = attempt_from_result("profile", args, _report(1, 2.0, "s", 7, verified=True, verification={"n": 1}),
                              ts=0.0, step=1, fp=None)
    assert odd is not None and odd.verified and odd.verification is None
