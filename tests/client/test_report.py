"""`status` (running, interrupted, finished, failed, from the log and the run's lock) and `report`
(report.md always, progress.png when something was timed), on runs built event by event in a real
SQLite log: each run's report and status name that run's own verified best, attempts are numbered
within their run, a report lives in its run's own folder and never replaces another run's."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from client import report_dir, report_plot
from client.goal import Budget, Goal
from client.loop import start_run
from client.report import markdown, write, write_report
from client.report_data import best_series, metric_of, progress, run_baseline_us
from client.result_text import repeat_text
from client.run_projection import AttemptRec, RunState, attempt_from_result
from client.run_status import RunLock, format_status, liveness, status_data
from state import EventLog
from tests.client.common import ROOT, STARTER

SPEEDUPS = [None, 1.1, 0.9, None, 1.4, 1.3]  # None: a failed attempt
JUDGED = {"verified": True, "verification": "judge:v1+bounds"}


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


class Steps:
    """A run's steps as the loop and a server sharing its log write them: the server's attempt event,
    then the client's agent.result carrying the event id; steps that judge nothing (`best`) in between."""

    def __init__(self, log: EventLog, run_id: str, target: float | None = None) -> None:
        self.log, self.run_id, self.step = log, run_id, 0
        start_run(log, run_id, Goal(problem="softmax", target_speedup=target, budget=Budget(steps=50)),
                  policy="scripted")

    def _call(self, tool: str, args: dict[str, Any]) -> None:
        self.step += 1
        self.log.append("agent.call", {"step": self.step, "call_id": f"{self.run_id}/{self.step}", "tool": tool,
                                       "args": args}, run_id=self.run_id)

    def lookup(self) -> None:
        """A step that judges nothing, so attempt numbers and steps part ways."""
        self._call("best", {"problem": "softmax"})
        self.log.append("agent.result", {"step": self.step, "call_id": f"{self.run_id}/{self.step}", "tool": "best",
                                         "ok": True, "status": "ok", "text": "..."}, run_id=self.run_id)

    def profile(self, speedup: float | None, verdict: dict[str, Any] | None = None, timed: bool = True) -> int:
        """A profile: correct at `speedup` (None: incorrect), with `verdict`'s verified fields; its event id."""
        source = STARTER.replace("NUM_WARPS = 8", f"NUM_WARPS = {self.step + 1}  # {self.run_id}")
        args = {"problem": "softmax", "shape": "bench", "source": source}
        self._call("profile", args)
        sha = self.log.put_source(source)
        ok = speedup is not None
        median = 64.0 / speedup if ok and timed and speedup else None
        fields = {"problem": "softmax", "shape": "bench", "source_sha": sha, "tool": "profile",
                  "outcome": "correct" if ok else "incorrect", "device": "NVIDIA H200" if timed else "cpu",
                  "median_us": median, "speedup": speedup if timed else None,
                  "baseline": "torch" if timed else None, "baseline_us": 64.0 if timed else None, **(verdict or {})}
        event_id = self.log.append("attempt", fields, run_id=self.run_id).id
        structured = {"problem": "softmax", "shape": "bench", "ok": True, "correct": ok,
                      "error_class": None if ok else "incorrect", "speedup": fields["speedup"],
                      "timing": {"median_us": median} if median else None,
                      "baseline": {"name": "torch", "median_us": 64.0} if timed else None,
                      "device": {"name": fields["device"]}, "source_sha": sha, "attempt_id": event_id,
                      **(verdict or {})}
        rec = attempt_from_result("profile", args, structured, ts=0.0, step=self.step, fp=None)
        assert rec is not None
        self.log.append("agent.result", {"step": self.step, "call_id": f"{self.run_id}/{self.step}",
                                         "tool": "profile", "ok": ok, "status": "ok", "text": "...",
                                         "structured": structured, "attempt": rec.as_dict()}, run_id=self.run_id)
        return event_id

    def end(self, state: str = "budget", reason: str = "the step budget is spent") -> None:
        self.log.append("run.end", {"state": state, "reason": reason}, run_id=self.run_id)


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


# -- status ---------------------------------------------------------------------------------------------

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
    assert {"run_id", "state", "steps", "best", "log_best"} <= set(data)
    assert data["steps"] == 6 and data["best"]["speedup"] == 1.4 and data["best"]["attempt_id"] == 105
    assert data["best"]["attempt_number"] == 5 and data["best"]["step"] == 5
    assert data["outcomes"] == {"correct": 4, "incorrect": 2} and data["goal_met"] is None
    env = {**os.environ, "MARATHON_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "cli", "status", "--json"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["run_id"] == "timed"
    human = subprocess.run([sys.executable, "-m", "cli", "status", "timed"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60).stdout
    assert "run timed: interrupted" in human and "marathon resume timed" in human
    assert "best of this run: correct, 45.71 us, 1.4x (attempt 5 of 6, step 5, event #105, NVIDIA H200)" in human
    assert "best in the whole log" not in human  # the run's own best is the log's


# -- one run's best, numbering, the table ---------------------------------------------------------------

def test_report_of_a_timed_run(tmp_path: Path) -> None:
    with EventLog(tmp_path / "marathon.db") as log:
        _timed_run(log, "timed")
        folder = write_report(log, "timed", tmp_path / "out")
        state = RunState.load(log, "timed")
        md = markdown(log, state)
    assert folder == tmp_path / "out" / "timed"
    base = run_baseline_us(state.attempts)
    assert base == 64.0
    assert best_series(state.attempts, "speedup", None, base) == pytest.approx([None, 1.1, 1.1, 1.1, 1.4, 1.4])
    assert (folder / "progress.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / "progress.png").stat().st_size > 10_000
    assert (folder / "report.md").read_text() == md
    assert "torch: 64 us median, over the 6 profile(s) of this run" in md
    assert ("This run's best (its own verified attempts only): attempt 5 (step 5, event #105): correct, 45.71 us, "
            "1.4x on NVIDIA H200, verified judge:v1+bounds.") in md
    assert "| 1 | 1 | profile | incorrect | - | - | no | #101 | tuner: try config 1 |" in md
    assert "| 2 | 2 | profile | correct | 58.18 | 1.1 | yes | #102 | tuner: try config 2 |" in md
    assert "| 5 (best) | 5 | profile | correct | 45.71 | 1.4 | yes | #105 |" in md
    assert "Improvements of the run's best: attempt 2 (step 2) 1.1x; attempt 5 (step 5) 1.4x." in md
    assert "![best so far over time and steps](progress.png)" in md
    assert "wider rows per program helped" in md and "- incorrect: 2" in md
    assert "NUM_WARPS = 5" in md  # the best kernel's source


def test_attempts_are_numbered_within_their_run(tmp_path: Path) -> None:
    """Numbers 1..n in the run's order, whatever the event ids (shared by every run) and the steps
    (lookups take steps too) are; the event id stays beside the number."""
    with EventLog(tmp_path / "m.db") as log:
        other = Steps(log, "other")
        for _ in range(5):
            other.profile(1.0, JUDGED)  # event ids the next run's attempts will not start from
        mine = Steps(log, "mine")
        ids = []
        for speedup in (1.1, None, 1.3, 1.2):
            mine.lookup()
            ids.append(mine.profile(speedup, JUDGED if speedup else None))
        state = RunState.load(log, "mine")
        md = markdown(log, state)
        data = status_data(log, "mine")
    assert [a.number for a in state.attempts] == [1, 2, 3, 4]
    assert [a.step for a in state.attempts] == [2, 4, 6, 8] and [a.attempt_id for a in state.attempts] == ids
    assert min(ids) > 4  # event ids are not the numbers
    assert [p.number for p in progress(state).points] == [1, 2, 3, 4]
    rows = [line for line in _section(md, "Progress").splitlines() if line.startswith("| ") and "---" not in line]
    assert [row.split(" | ")[0].lstrip("| ") for row in rows[1:]] == ["1", "2", "3 (best)", "4"]
    assert f"attempt 3 (step 6, event #{ids[2]})" in md
    assert data["best"]["attempt_number"] == 3 and data["best"]["attempt_id"] == ids[2] and data["attempts"] == 4
    assert f"attempt 3 of 4, step 6, event #{ids[2]}" in format_status(data)
    # The record as logged does not carry the number: a fold derives it from the run's order.
    assert "number" not in state.attempts[0].as_dict()


def test_an_unverified_attempt_is_never_the_best(tmp_path: Path) -> None:
    with EventLog(tmp_path / "m.db") as log:
        run = Steps(log, "r")
        run.profile(1.2, JUDGED)
        fast = run.profile(9.0, {"verified": False, "verification": None})  # the judge did not vouch for it
        run.profile(20.0)  # logged before `verified` existed
        run.end()
        state = RunState.load(log, "r")
        md = write(log, "r", tmp_path / "reports").markdown.read_text()
        data = status_data(log, "r")
        only_unverified = Steps(log, "cpu")
        only_unverified.profile(3.0, {"verified": False, "verification": None})
        cpu_md = markdown(log, RunState.load(log, "cpu"))
    best = _section(md, "Best kernel")
    assert "attempt 1 (step 1, event #" in best and "1.2x" in best
    assert "9x" not in best and "20x" not in best and f"event #{fast}" not in best
    assert "| 1 (best) |" in md and "| 2 | 2 | profile | correct | 7.111 | 9 | no |" in md
    assert data["best"]["speedup"] == 1.2 and data["best"]["verified"] is True
    assert data["log_best"]["speedup"] == 1.2  # unverified attempts are not the log's best either
    points = progress(state).points
    assert [p.improved for p in points] == [True, False, False]
    assert [p.best for p in points] == pytest.approx([1.2, 1.2, 1.2])
    assert "none: its 1 correct attempt(s) are not verified" in _section(cpu_md, "Best kernel")


# -- two runs in one log ---------------------------------------------------------------------------------

def test_each_run_names_its_own_best_and_labels_the_logs(tmp_path: Path) -> None:
    """An earlier run's report and status name its own kernel as best, with a later run's faster one
    beside it labelled as the whole log's; a run that judged nothing never takes a later run's kernel as
    where it started from."""
    with EventLog(tmp_path / "m.db") as log:
        idle = Steps(log, "idle")  # ended before anything was tried
        idle.end("done", "nothing to tune")
        early = Steps(log, "early")
        early_best = early.profile(1.5, JUDGED)
        early.profile(1.2, JUDGED)
        early.end()
        late = Steps(log, "late")
        late.lookup()
        late.profile(2.0, JUDGED)
        late_best = late.profile(3.0, JUDGED)
        late.end()
        out = tmp_path / "reports"
        md = {r: write(log, r, out).markdown.read_text() for r in ("idle", "early", "late")}
        status = {r: status_data(log, r) for r in ("idle", "early", "late")}
        idle_start = RunState.load(log, "idle").first_best
    early_best_s = _section(md["early"], "Best kernel")
    assert (f"This run's best (its own verified attempts only): attempt 1 (step 1, event #{early_best}): correct, "
            "42.67 us, 1.5x") in early_best_s
    assert (f"Best in the whole log (another run's, not this run's): attempt 2 of run late (event #{late_best}): "
            "correct, 21.33 us, 3x") in early_best_s
    assert early_best_s.index("This run's best") < early_best_s.index("Best in the whole log")
    assert f"attempt 2 (step 3, event #{late_best})" in _section(md["late"], "Best kernel")
    assert "Best in the whole log" not in md["late"]  # its own best is the log's
    assert "Best in the log before this run's first attempt: attempt 1 of run early" in md["late"]
    idle_best = _section(md["idle"], "Best kernel")
    assert "none: no verified correct attempt" in idle_best and "before this run" not in idle_best
    assert idle_start is None
    assert status["early"]["best"]["attempt_id"] == early_best and status["early"]["best"]["run_id"] == "early"
    assert status["early"]["log_best"]["attempt_id"] == late_best
    assert status["early"]["log_best"]["attempt_number"] == 2  # numbered within its own run
    assert status["late"]["best"]["attempt_id"] == late_best and status["idle"]["best"] is None
    text = format_status(status["early"])
    assert "best of this run: correct, 42.67 us, 1.5x (attempt 1 of 2, step 1" in text
    assert f"best in the whole log: correct, 21.33 us, 3x (attempt 2 of run late, event #{late_best}" in text


def test_a_repeat_is_answered_with_the_attempts_number_in_its_run(tmp_path: Path) -> None:
    with EventLog(tmp_path / "m.db") as log:
        theirs = Steps(log, "theirs")
        their_id = theirs.profile(1.1, JUDGED)
        run = Steps(log, "r")
        run.lookup()
        mine = run.profile(1.2, JUDGED)
        state = RunState.load(log, "r")  # the server's attempt event is folded before the run's own result
    own = next(rec for rec in state.tried.values() if rec.run_id == "r")
    assert own is state.attempts[0]  # the run's own record, with its step and number
    other = next(rec for rec in state.tried.values() if rec.run_id == "theirs")
    assert f"profiled in this run as attempt 1 (step 2, event #{mine}): correct" in repeat_text(own, "r")
    assert f"profiled in run theirs as attempt event #{their_id}: correct" in repeat_text(other, "r")


# -- the figure, and no figure ----------------------------------------------------------------------------

def test_no_plot_for_a_run_with_nothing_timed(tmp_path: Path) -> None:
    with EventLog(tmp_path / "m.db") as log:
        empty = Steps(log, "empty")
        empty.lookup()
        empty.end("done", "every configuration is tried")
        cpu = Steps(log, "cpu")
        for _ in range(3):
            cpu.profile(1.0, {"verified": False, "verification": None}, timed=False)
        files = {r: write(log, r, tmp_path / "reports") for r in ("empty", "cpu")}
    for run_id, f in files.items():
        assert f.plot is None and not (f.folder / "progress.png").exists(), run_id
        md = f.markdown.read_text()
        assert "![" not in md and f.no_plot is not None and f.no_plot in md
    assert files["empty"].no_plot == ("No attempt was judged in this run (it ended: done: every configuration is "
                                      "tried), so there is nothing to plot.")
    assert files["cpu"].no_plot is not None and files["cpu"].no_plot.startswith(
        "Nothing was timed in this run: none of its 3 attempts (correct 3) has a measured time")
    assert "| - | | | no attempts in this run |" in files["empty"].markdown.read_text()


def test_report_md_is_written_when_the_plot_cannot_be_drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with EventLog(tmp_path / "m.db") as log:
        _timed_run(log, "timed")
        drawn = write(log, "timed", tmp_path / "reports")
        assert drawn.plot is not None and drawn.plot.exists()

        def broken(*args: Any) -> None:
            raise RuntimeError("no canvas for png\nsecond line")

        monkeypatch.setattr(report_plot, "draw", broken)
        files = write(log, "timed", tmp_path / "reports")
    md = files.markdown.read_text()
    assert files.plot is None and not (files.folder / "progress.png").exists()  # the stale figure is gone
    assert "The plot could not be drawn (RuntimeError: no canvas for png); the table below has every attempt." in md
    assert "second line" not in md and "![" not in md
    assert "| 5 (best) | 5 | profile | correct |" in md  # the rest of the report is all there


def test_report_without_matplotlib_still_writes_report_md(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.ticker"):
        monkeypatch.setitem(sys.modules, name, None)  # `import` raises ModuleNotFoundError
    with EventLog(tmp_path / "m.db") as log:
        _timed_run(log, "timed")
        files = write(log, "timed", tmp_path / "reports")
    assert files.plot is None and files.markdown.exists()
    assert files.no_plot is not None and files.no_plot.startswith("The plot could not be drawn (ModuleNotFoundError")


def test_the_figure_has_whole_step_ticks_and_numbered_improvements(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    figures: list[Any] = []
    save = Figure.savefig

    def keep(self: Any, *args: Any, **kwargs: Any) -> None:
        figures.append(self)
        save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    with EventLog(tmp_path / "m.db") as log:
        run = Steps(log, "r", target=1.5)
        for speedup in (1.1, 0.9, 1.3, None, 1.25, 1.4):
            run.profile(speedup, JUDGED if speedup else None)
        files = write(log, "r", tmp_path / "reports")
    assert files.plot is not None and files.plot.read_bytes()[:4] == b"\x89PNG"
    assert not list(files.folder.glob(".*.partial"))
    (fig,) = figures
    ax_time, ax_step = fig.axes[:2]
    assert ax_step.get_xlabel() == "step" and ax_time.get_xlabel().startswith("active ")
    ticks = [t for t in ax_step.get_xticks() if ax_step.get_xlim()[0] <= t <= ax_step.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    for ax in (ax_time, ax_step):
        assert [t.get_text() for t in ax.texts] == ["1", "3", "6"]  # the attempts that improved the best
        assert ax.get_ylabel() == "speedup over torch at 64 us (x)"
    assert "target" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_best_curve_uses_one_baseline_figure_and_never_falls() -> None:
    """A wandering baseline must not let a slower kernel's luckier ratio lower or raise the best curve."""
    def rec(step: int, us: float, base: float) -> AttemptRec:
        return AttemptRec(tool="profile", outcome="correct", ts=0.0, step=step, attempt_id=step, median_us=us,
                          speedup=base / us, baseline="torch", baseline_us=base, verified=True,
                          verification="judge:v1+bounds")

    attempts = [rec(1, 100.0, 30.0), rec(2, 99.0, 20.0), rec(3, 120.0, 60.0), rec(4, 50.0, 25.0)]
    assert metric_of(attempts) == "speedup"
    # speedups logged without the baseline's time cannot be put on one scale: the plot falls back to time
    assert metric_of([AttemptRec(**{**a.as_dict(), "baseline_us": None}) for a in attempts]) == "median_us"
    base = run_baseline_us(attempts)
    assert base == pytest.approx(27.5)
    series = best_series(attempts, "speedup", None, base)
    assert series == pytest.approx([0.275, 27.5 / 99, 27.5 / 99, 0.55])
    assert all(b >= a for a, b in itertools.pairwise(series))


# -- folders ----------------------------------------------------------------------------------------------

def test_every_report_goes_to_its_runs_own_folder(tmp_path: Path) -> None:
    """The demo's case: a second run that tries nothing must not replace the first run's report."""
    out = tmp_path / "reports"
    with EventLog(tmp_path / "m.db") as log:
        first = Steps(log, "first")
        first.profile(1.3, JUDGED)
        first.end()
        a = write(log, "first", out)
        kept = {p.name: p.read_bytes() for p in a.folder.iterdir()}
        second = Steps(log, "second")
        second.lookup()
        second.end("done", "every configuration is tried")
        b = write(log, "second", out)
        assert a.folder == out / "first" and b.folder == out / "second"
        assert {p.name: p.read_bytes() for p in a.folder.iterdir()} == kept  # untouched
        assert a.plot is not None and b.plot is None and "No attempt was judged" in b.markdown.read_text()
        # the run's own folder, given directly, is refreshed; another run's is refused, directly or as a parent
        assert write(log, "second", out / "second").folder == out / "second"
        with pytest.raises(report_dir.FolderTaken, match="holds the report of run 'first'"):
            write(log, "second", out / "first")
        (out / "third").mkdir()
        (out / "third" / "report.md").write_text("# Run first: softmax at shape bench\n")  # before the marker
        with pytest.raises(report_dir.FolderTaken):
            report_dir.claim(out / "third", "second")
    assert {p.name: p.read_bytes() for p in a.folder.iterdir()} == kept


def test_folder_names_are_safe_and_distinct() -> None:
    assert report_dir.folder_name("softmax-20261201-102144-c9f2") == "softmax-20261201-102144-c9f2"
    names = {rid: report_dir.folder_name(rid) for rid in ("../up", "a/b", "a_b", "a b", ".hidden", "", "..")}
    for rid, name in names.items():
        assert "/" not in name and not name.startswith(".") and name, (rid, name)
    assert len(set(names.values())) == len(names)  # "a/b" and "a b" do not share a_b's folder
    assert report_dir.run_folder(Path("/r"), "a/b") == Path("/r") / names["a/b"]
    assert report_dir.run_folder(Path("/r/x"), "x") == Path("/r/x")  # a folder named after the run is its own


def test_marathon_report_cli_writes_a_folder_per_run(tmp_path: Path) -> None:
    with EventLog(tmp_path / "marathon.db") as log:
        _timed_run(log, "timed")
        empty = Steps(log, "empty")
        empty.end("done", "every configuration is tried")
    env = {**os.environ, "MARATHON_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}

    def marathon(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)

    timed = marathon("report", "timed", "--out", str(tmp_path / "reports"))
    assert timed.returncode == 0, timed.stderr
    assert timed.stdout.split() == [str(tmp_path / "reports" / "timed" / n) for n in ("report.md", "progress.png")]
    nothing = marathon("report")  # the newest run, into $MARATHON_HOME/reports/RUN
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout.split() == [str(tmp_path / "reports" / "empty" / "report.md")]
    assert "no plot: No attempt was judged" in nothing.stderr
    refused = marathon("report", "empty", "--out", str(tmp_path / "reports" / "timed"))
    assert refused.returncode == 2 and "holds the report of run 'timed'" in refused.stderr
    assert (tmp_path / "reports" / "timed" / "progress.png").exists()


def test_the_demo_reports_into_its_runs_folder() -> None:
    """scripts/demo.sh names its run and writes that run's report under reports/, one folder per run."""
    script = (ROOT / "scripts" / "demo.sh").read_text()
    lines = [line.strip() for line in script.splitlines() if not line.lstrip().startswith("#")]
    run = next(line for line in lines if line.startswith("marathon run "))
    assert '--run-id "$run_id"' in run and run.index('"$@"') < run.index("--run-id")  # the demo's id wins
    assert "--report" not in run
    assert 'marathon report "$run_id" --out reports' in lines
    assert "reports/demo" not in script


# -- resume ------------------------------------------------------------------------------------------------

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
        out = subprocess.run([sys.executable, "-m", "cli", "resume", "r"], cwd=ROOT, env=env,
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
