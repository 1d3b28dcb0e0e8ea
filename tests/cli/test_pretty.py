"""Human output on a terminal (cli.pretty, drawn with rich) and everywhere else (plain text, unchanged).

`marathon status`, `log` and `problems` draw tables and styled headings when stdout is a terminal (here
forced, as a user forces it: FORCE_COLOR, or a Console with force_terminal); through a pipe they print
the plain text they always printed, byte for byte, and --json is the same JSON either way.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cli.log import _human
from cli.pretty import log_view, problems_view, show, status_view
from client.goal import Budget, Goal
from client.loop import start_run
from client.run_status import format_status, status_data
from server.summaries import problems_text
from state import EventLog

ROOT = Path(__file__).resolve().parents[2]
RUNS = ("alpha-run-1", "beta-run-2")
TTY_VARS = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "COLUMNS")


def _drawn(renderable: Any, width: int = 200) -> str:
    console = Console(file=io.StringIO(), force_terminal=True, color_system="standard", width=width)
    console.print(renderable)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[" in out  # styled: a terminal's escape codes
    return out


def _log_with_two_runs(home: Path) -> None:
    with EventLog(home / "marathon.db") as log:
        for run_id in RUNS:
            start_run(log, run_id, Goal(problem="softmax", budget=Budget(steps=5)), policy="tuner")
        log.append("note", {"text": "markup stays text: [bold]x[/bold] ['a']"}, run_id=RUNS[1])


def _cli(home: Path, *args: str, terminal: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k not in TTY_VARS}
    env.update({"MARATHON_HOME": str(home), "PYTHONPATH": str(ROOT)})
    if terminal:
        env.update({"FORCE_COLOR": "1", "COLUMNS": "200"})
    proc = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_log_on_a_terminal_is_a_table_of_every_run(marathon_home: Path) -> None:
    _log_with_two_runs(marathon_home)
    out = _cli(marathon_home, "log", terminal=True)
    assert "\x1b[" in out and "┃" in out  # styled, a table's header
    header = next(line for line in out.splitlines() if "┃" in line)
    assert all(name in header for name in ("id", "time", "run", "kind", "payload"))
    rows = [line for line in out.splitlines() if "│" in line]
    for run_id in RUNS:  # each run's id stands whole in the run column, on its run.start row
        assert any(f" {run_id} " in row and "run.start" in row for row in rows), out
    assert "[bold]x[/bold] ['a']" in out  # data is never read as rich markup


def test_log_and_status_through_a_pipe_are_the_plain_text(marathon_home: Path) -> None:
    _log_with_two_runs(marathon_home)
    events = json.loads(_cli(marathon_home, "log", "--json", terminal=False))
    plain = _cli(marathon_home, "log", terminal=False)
    assert plain == _human(events) + "\n" and "\x1b" not in plain and "│" not in plain
    assert plain.splitlines()[0].split()[3:5] == [RUNS[0], "run.start"]
    # --json is the same JSON on a terminal, undrawn
    assert json.loads(_cli(marathon_home, "log", "--json", terminal=True)) == events

    with EventLog(marathon_home / "marathon.db") as log:
        data = json.loads(json.dumps(status_data(log, RUNS[0]), default=str))
    status = _cli(marathon_home, "status", RUNS[0], terminal=False)
    assert status == format_status(data) + "\n"
    assert status.splitlines()[0] == f"run {RUNS[0]}: interrupted"
    drawn = _cli(marathon_home, "status", RUNS[0], terminal=True)
    assert "\x1b[" in drawn and RUNS[0] in drawn and f"marathon resume {RUNS[0]}" in drawn


def _status(**best: Any) -> dict[str, Any]:
    own = {"run_id": "r1", "outcome": "correct", "median_us": 45.71, "speedup": 1.4, "attempt_number": 5,
           "attempt_id": 105, "step": 5, "device": "NVIDIA H200"}
    return {"run_id": "r1", "state": "finished", "end_state": "goal", "reason": "target met", "problem": "softmax",
            "shape": "bench", "policy": "tuner", "model": None, "steps": 6, "turns": 6, "attempts": 6,
            "outcomes": {"correct": 4, "incorrect": 2}, "budget": {"steps": 10}, "sessions": 1,
            "spend": {"tokens_in": 1000, "tokens_out": 234, "cost_usd": 0.5, "active_s": 3600, "compactions": 0},
            "best": own, "log_best": {**own, **best}}


def test_status_view_tables_the_run_and_the_logs_best() -> None:
    out = _drawn(status_view(_status(run_id="r0", attempt_number=3, attempt_id=17, speedup=2.5)))
    assert "run" in out and "r1" in out and "finished" in out and "target met" in out
    this = next(line for line in out.splitlines() if "this run" in line)
    assert all(s in this for s in ("correct", "45.71", "1.4x", "5 of 6", "#105", "NVIDIA H200")), this
    whole = next(line for line in out.splitlines() if "whole log" in line)
    assert all(s in whole for s in ("2.5x", "3 of run r0", "#17")), whole
    assert "1,234 tokens" in out and "resume" not in out
    # the log's best is this run's own: one row
    assert "whole log" not in _drawn(status_view(_status()))
    none = _drawn(status_view({**_status(), "best": None, "log_best": None}))
    assert "none yet (no verified attempt)" in none and "┃" not in none


def test_problems_view_tables_each_problems_shapes() -> None:
    softmax = {"bench": {"rows": 4096, "cols": 8192}, "odd": {"rows": 3, "cols": 1000}}
    problems: list[dict[str, Any]] = [
        {"name": "softmax", "summary": "Row softmax", "shapes": softmax,
         "tolerance": {"rel_err": 2e-05, "atol": 1e-07, "rtol": 0.0001},
         "baselines": [{"name": "torch"}, {"name": "torch_compile"}]},
        {"name": "kda", "summary": "gated [delta] rule", "shapes": {"small": {"B": 1, "T": 100}},
         "tolerance": {}, "baselines": []}]
    out = _drawn(problems_view(problems))
    lines = out.splitlines()
    header = next(line for line in lines if "shape" in line and "rows" in line)
    assert "cols" in header and "┃" in header
    assert any("bench" in line and "4096" in line and "8192" in line for line in lines)
    assert "gated [delta] rule" in out and "torch, torch_compile" in out and "resources:" in out
    # no terminal: the MCP tool's plain text, as before
    buf = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", buf)
        for k in TTY_VARS:
            mp.delenv(k, raising=False)
        show(problems, False, problems_text, problems_view)
    assert buf.getvalue() == problems_text(problems) + "\n"


def test_json_is_never_drawn(capsys: pytest.CaptureFixture[str]) -> None:
    forced = Console(file=io.StringIO(), force_terminal=True)
    show([{"id": 1}], True, _human, log_view, console=forced)
    assert capsys.readouterr().out == json.dumps([{"id": 1}], indent=2) + "\n"
    assert forced.file.getvalue() == ""  # type: ignore[attr-defined]
