"""A run's report, read from the log: report.md, and progress.png when there is something to draw.

The Markdown has the goal, the baseline, the run's own best kernel (verified attempts only) with its
numbers and source, the whole log's best beside it when that is another run's, every attempt numbered
within the run (with its step and event id), the strategies tried, failures by class and the spend.

report.md is always written: a run with nothing timed says so in words instead of a blank figure, and
when the figure cannot be drawn (any error, a broken plotting install included) report.md carries a
one-line note in its place. Every report goes to its run's own folder (client.report_dir), so writing
one refreshes that run's folder and never touches another run's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client import report_dir, report_plot
from client.report_data import Progress, progress, run_baseline_us
from client.run_projection import AttemptRec, RunState, fmt_us
from client.run_status import attempt_number, liveness

PLOT = "progress.png"
TABLE_ROWS = 200


@dataclass(frozen=True)
class ReportFiles:
    """What a report wrote: the folder, report.md, and progress.png or why there is none."""

    folder: Path
    markdown: Path
    plot: Path | None
    no_plot: str | None  # why there is no figure (nothing timed, or the drawing failed); None when drawn


def write(log: Any, run_id: str, out: Path) -> ReportFiles:
    """Write the report of `run_id` into its folder under `out` (`report_dir.run_folder`).

    KeyError: no such run. report_dir.FolderTaken: the folder holds another run's report. A figure
    that cannot be drawn is reported in report.md, never raised."""
    state = RunState.load(log, run_id)
    folder = report_dir.run_folder(out, run_id)
    report_dir.claim(folder, run_id)
    prog = progress(state)
    png = folder / PLOT
    no_plot = None if prog.timed else _untimed_words(state)
    if no_plot is None:
        try:
            report_plot.draw(prog, png)
        except Exception as exc:
            first = (str(exc).splitlines() or [""])[0][:200]
            no_plot = f"The plot could not be drawn ({type(exc).__name__}: {first}); the table below has every attempt."
    if no_plot is not None:
        png.unlink(missing_ok=True)  # this run's own figure from an earlier report: out of date now
    md = folder / report_dir.REPORT
    _write_text(md, markdown(log, state, prog, no_plot))
    return ReportFiles(folder=folder, markdown=md, plot=None if no_plot else png, no_plot=no_plot)


def write_report(log: Any, run_id: str, out: Path) -> Path:
    """`write`, returning the run's report folder."""
    return write(log, run_id, out).folder


def _write_text(path: Path, text: str) -> None:
    """Replace the file whole: a crash while writing leaves the previous report, never half of one."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def _untimed_words(state: RunState) -> str:
    attempts = [a for a in state.attempts if a.step is not None]
    if not attempts:
        ended = state.ended or {}
        why = f" (it ended: {ended.get('state')}: {ended.get('reason')})" if ended else ""
        return f"No attempt was judged in this run{why}, so there is nothing to plot."
    outcomes = ", ".join(f"{o} {n}" for o, n in state.outcomes.most_common())
    return (f"Nothing was timed in this run: none of its {len(attempts)} attempts ({outcomes}) has a "
            "measured time (on a CPU the kernels are only checked under the Triton interpreter), so there is no "
            "plot; the table below lists every attempt.")


# -- the Markdown -------------------------------------------------------------------------------------

def markdown(log: Any, state: RunState, prog: Progress | None = None, no_plot: str | None = None) -> str:
    """report.md of a run; `no_plot` replaces the figure with words (None: progress.png is beside it)."""
    goal = state.goal
    assert goal is not None
    prog = prog if prog is not None else progress(state)
    live = liveness(log.path, state)
    ended = state.ended or {}
    model = f" ({state.start.get('model')})" if state.start.get("model") else ""
    lines = [f"# Run {state.run_id}: {goal.problem} at shape {goal.shape}", "",
             f"State: **{live}**" + (f" ({ended.get('state')}: {ended.get('reason')})" if ended else ""),
             f"Policy: {state.start.get('policy')}{model}", f"Attempts: {_attempts_summary(state)}",
             "", "## Goal", "", "```text", str(state.start.get("goal", "")), "```", "",
             "## Baseline", "", _baseline_line(state), "",
             "## Best kernel", "", *_best_lines(log, state)]
    if state.best is not None and state.best_source:
        lines += ["", "```python", state.best_source.rstrip(), "```"]
    lines += ["", "## Progress", ""]
    lines += [no_plot] if no_plot else [f"![best so far over time and steps]({PLOT})"]
    lines += _improvement_lines(prog)
    lines += ["", *_table(log, state)]
    lines += ["", "## Strategies tried", ""]
    notes = _own_notes(log, state)
    lines += [f"- note #{i}" + (f" [{', '.join(tags)}]" if tags else "") + f": {' '.join(text.split())}"
              for i, (text, tags) in sorted(notes.items())] or ["- no notes recorded in this run"]
    lines += ["", "## Failures by class", ""]
    lines += [f"- {cls}: {n}" for cls, n in state.failures.most_common()] or ["- none"]
    s = state.spend
    lines += ["", "## Spend", "",
              f"- steps: {state.steps_done} (model turns {state.turns}); answered from the log: "
              f"{state.status_counts.get('from_log', 0)}; interrupted: {state.status_counts.get('interrupted', 0)}",
              f"- active time: {state.active_seconds() / 3600:.2f} h over {len(state.sessions)} session(s)",
              f"- model tokens: {s.tokens_in:,} in, {s.tokens_out:,} out; cost ${s.cost_usd:.2f}",
              f"- compactions: {s.compactions} ({s.compaction_tokens:,} tokens); model errors: {s.model_errors}", ""]
    return "\n".join(lines)


def _attempts_summary(state: RunState) -> str:
    n = len(state.attempts)
    if not n:
        return "none"
    outcomes = ", ".join(f"{o} {c}" for o, c in state.outcomes.most_common())
    verified = sum(1 for a in state.attempts if a.verified)
    return f"{n}, numbered 1 to {n} below ({outcomes}; {verified} verified)"


def _baseline_line(state: RunState) -> str:
    own = [a for a in state.attempts if a.baseline_us is not None]
    us = run_baseline_us(own)
    if us is not None:
        name = next((a.baseline for a in own if a.baseline), "the baseline")
        return (f"{name}: {fmt_us(us)} us median, over the {len(own)} profile(s) of this run that timed it (each "
                "profile times the baseline beside the candidate; the plot's speedups are against this one figure).")
    text = "Not measured in this run (no timed profile: on a CPU the kernels are only checked)."
    if state.baseline is not None:
        text += f" The log has {state.baseline[0]} at {fmt_us(state.baseline[1])} us from another profile."
    return text


def describe(log: Any, state: RunState, rec: AttemptRec) -> str:
    """One attempt in words, numbered within its own run: "attempt 3 (step 5, event #105): correct, ..."."""
    device = f" on {rec.device}" if rec.device else ""
    how = f", verified {rec.verification}" if rec.verification else ""
    return f"{rec.ident(state.run_id, attempt_number(log, state, rec))}: {rec.numbers()}{device}{how}"


def _best_lines(log: Any, state: RunState) -> list[str]:
    """This run's best, and the whole log's beside it when that is not this run's best: labelled so that
    a later run's kernel is never read as this run's."""
    lines = []
    if state.best is not None:
        lines.append(f"This run's best (its own verified attempts only): {describe(log, state, state.best)}.")
    else:
        correct = sum(1 for a in state.attempts if a.outcome == "correct")
        why = (f"its {correct} correct attempt(s) are not verified by the judge" if correct else
               "no verified correct attempt")
        lines.append(f"This run's best (its own verified attempts only): none: {why}.")
    other = state.log_best
    if other is not None and other is not state.best and other.run_id != state.run_id:
        lines.append(f"Best in the whole log (another run's, not this run's): {describe(log, state, other)}.")
    start = state.first_best
    if start is not None and start is not other:
        lines.append(f"Best in the log before this run's first attempt: {describe(log, state, start)}.")
    return lines


def _improvement_lines(prog: Progress) -> list[str]:
    improved = [p for p in prog.improvements if p.value is not None]
    if not improved:
        return []
    steps = "; ".join(f"attempt {p.number} (step {p.step}) {prog.figure(p.value)}" for p in improved
                      if p.value is not None)
    return ["", f"Improvements of the run's best: {steps}."]


def _table(log: Any, state: RunState) -> list[str]:
    lines = ["| attempt | step | tool | outcome | median us | speedup | verified | event | proposed as |",
             "| ---: | ---: | --- | --- | ---: | ---: | --- | ---: | --- |"]
    rows = [a for a in state.attempts if a.step is not None]
    if not rows:
        return [*lines, "| - | | | no attempts in this run | | | | | |"]
    if len(rows) > TABLE_ROWS:
        lines.append(f"| ... | | | {len(rows) - TABLE_ROWS} earlier attempts | | | | | |")
        rows = rows[-TABLE_ROWS:]
    turn_texts = _turn_texts(log, state.run_id)
    for a in rows:
        us = fmt_us(a.median_us) if a.median_us is not None else "-"
        sp = f"{a.speedup:.3g}" if a.speedup is not None else "-"
        why = turn_texts.get(a.step or 0, "").replace("|", "\\|")[:140]
        outcome = a.outcome + (f" ({a.error_class})" if a.error_class and a.error_class != a.outcome else "")
        best = " (best)" if a is state.best else ""
        event = f"#{a.attempt_id}" if a.attempt_id is not None else "-"
        lines.append(f"| {a.number}{best} | {a.step} | {a.tool} | {outcome} | {us} | {sp} | "
                     f"{'yes' if a.verified else 'no'} | {event} | {why} |")
    return lines


def _own_notes(log: Any, state: RunState) -> dict[int, tuple[str, list[str]]]:
    """Every note of the run (the log's note events, and the run's own note results when the server
    keeps another log), not only the newest few that the run state keeps for the pinned block."""
    out = {n["id"]: (str(n.get("text", "")), [str(t) for t in n["tags"]])
           for n in log.notes(run_id=state.run_id, limit=None)}
    for n in state.notes:
        if n.run_id == state.run_id:
            out.setdefault(n.id, (n.text, n.tags))
    return out


def _turn_texts(log: Any, run_id: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for ev in log.events(run_id=run_id, kinds=["model.turn"]):
        text = (ev.payload.get("text") or "").strip()
        first = text.splitlines()[0] if text else ""
        for c in ev.payload.get("calls", []):
            out[int(c["step"])] = first
    return out
