"""A run's report, read from the log: progress.png and report.md.

The plot shows the run's own best-so-far (verified attempts only) against active hours and against
steps, with every attempt marked by its outcome. The metric is the speedup over the baseline; where
no attempt was timed against a baseline it is the median time (lower is better); where nothing was
timed at all (a CPU run: the kernels are only checked under the interpreter) each attempt's outcome
is drawn on a strip per outcome, so the plot still says what happened at every step. The Markdown
has the goal, the baseline, the best kernel with its numbers and source, the strategies tried (notes
and the turn that proposed each attempt), failures by class and the spend.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from client.pinned import best_line, log_best_line
from client.runs import liveness
from client.runstate import AttemptRec, RunState, fmt_us

MARKERS: dict[str, tuple[str, str]] = {  # outcome -> (matplotlib marker, colour)
    "correct": ("o", "#2a9d3f"), "compiled": ("s", "#6c8ebf"), "incorrect": ("x", "#d62728"),
    "compile_error": ("^", "#ff7f0e"), "rejected": ("D", "#9467bd"), "timeout": ("v", "#8c564b"),
    "crashed": ("P", "#e377c2"), "error": ("*", "#7f7f7f"),
}
TABLE_ROWS = 200


def _metric(attempts: list[AttemptRec]) -> str:
    """Speedup where a baseline was timed (against the run's one figure for it), else the median time."""
    if any(a.baseline_us and a.median_us for a in attempts if a.outcome == "correct"):
        return "speedup"
    if any(a.median_us is not None for a in attempts if a.outcome == "correct"):
        return "median_us"
    return "none"


def run_baseline_us(attempts: list[AttemptRec]) -> float | None:
    """One baseline time for the whole run: the median of every baseline timing its profiles took.

    Each profile times the baseline beside the candidate; a launch-bound baseline wanders between
    profiles, so per-profile ratios would let a slower kernel's luckier ratio outrank a faster one.
    Plotting every kernel against one figure keeps the best-so-far curve monotone in time.
    """
    times = [a.baseline_us for a in attempts if a.outcome == "correct" and a.baseline_us]
    return statistics.median(times) if times else None


def _value(rec: AttemptRec | None, metric: str, base_us: float | None = None) -> float | None:
    if rec is None or rec.outcome != "correct":
        return None
    if metric == "speedup":
        return base_us / rec.median_us if base_us and rec.median_us else None
    return rec.median_us if metric == "median_us" else None


def best_series(attempts: list[AttemptRec], metric: str, start: AttemptRec | None,
                base_us: float | None = None) -> list[float | None]:
    """The metric of the best attempt after each attempt (None until something correct is timed).

    "Best" is the log's rule, the one `best`, `status` and the goal use: the fastest median time of a
    verified correct attempt; its speedup is taken against the run's one baseline figure
    (`run_baseline_us`), so the curve never falls.
    """
    best = start if _value(start, metric, base_us) is not None else None
    out: list[float | None] = []
    for rec in attempts:
        if _value(rec, metric, base_us) is not None and rec.better_than(best):
            best = rec
        out.append(_value(best, metric, base_us) if best is not None else None)
    return out


def plot(state: RunState, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attempts = [a for a in state.attempts if a.step is not None]
    metric = _metric(attempts)
    base_us = run_baseline_us(attempts) if metric == "speedup" else None
    t0 = state.sessions[0][0] if state.sessions else (attempts[0].ts if attempts else 0.0)
    hours = _active_hours(state, [a.ts for a in attempts], t0)
    unit = "hours"
    if not hours or max(hours) < 2:
        hours, unit = [h * 60 for h in hours], "minutes"
    steps = [a.step or 0 for a in attempts]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    base_name = next((a.baseline for a in attempts if a.baseline), "the baseline")
    label = {"speedup": f"speedup over {base_name} at {fmt_us(base_us or 0.0)} us (x)",
             "median_us": "best median time (us, lower is better)", "none": "outcome (nothing was timed)"}[metric]
    outcomes = [o for o in MARKERS if any(a.outcome == o for a in attempts)]
    for ax, xs, xlabel in ((axes[0], hours, f"active {unit} since the start"), (axes[1], steps, "step")):
        if metric == "none":
            for a, x in zip(attempts, xs):
                marker, colour = MARKERS.get(a.outcome, ("*", "#000000"))
                ax.scatter([x], [outcomes.index(a.outcome) if a.outcome in outcomes else -1], marker=marker,
                           color=colour, s=40)
            ax.set_yticks(range(len(outcomes)), outcomes)
            ax.set_ylim(-0.8, max(len(outcomes) - 0.2, 0.8))
        else:
            series = best_series(attempts, metric, None, base_us)  # this run's own verified attempts
            pts = [(x, y) for x, y in zip(xs, series) if y is not None]
            if pts:
                ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", color="#1f77b4",
                        label="best so far (this run)")
            before = _value(state.first_best, metric, base_us)
            if before is not None:
                ax.axhline(before, color="#1f77b4", linestyle=":", linewidth=1, label="best in the log at the start")
            timed = [_value(a, metric, base_us) for a in attempts]
            known = [v for v in timed if v is not None]
            floor = (min(known) * 0.95 if metric == "speedup" else max(known) * 1.05) if known else 0.0
            for a, x, v in zip(attempts, xs, timed):
                marker, colour = MARKERS.get(a.outcome, ("*", "#000000"))
                ax.scatter([x], [v if v is not None else floor], marker=marker, color=colour, s=36,
                           alpha=1.0 if v is not None else 0.5, label=a.outcome)
            if state.goal is not None:
                target = state.goal.target_speedup if metric == "speedup" else state.goal.target_us
                if target is not None:
                    ax.axhline(target, color="#999999", linestyle="--", linewidth=1, label="target")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        handles, names = ax.get_legend_handles_labels()
        unique = dict(zip(names, handles))
        if unique:
            ax.legend(unique.values(), unique.keys(), fontsize=8, loc="best")
    goal = state.goal
    title = f"run {state.run_id}: {goal.problem}/{goal.shape}" if goal else f"run {state.run_id}"
    if metric != "speedup" and attempts:
        title += " (untimed attempts drawn at the edge)" if metric == "median_us" else " (no timing: CPU run)"
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _active_hours(state: RunState, stamps: list[float], t0: float) -> list[float]:
    """Hours of active time at each stamp: gaps between sessions (a crash, a pause) are left out."""
    if not state.sessions:
        return [(ts - t0) / 3600 for ts in stamps]
    out = []
    for ts in stamps:
        total = sum(max(0.0, min(ts, last) - start) for start, last in state.sessions if ts > start)
        out.append(total / 3600)
    return out


def markdown(log: Any, state: RunState) -> str:
    goal = state.goal
    assert goal is not None
    live = liveness(log.path, state)
    ended = state.ended or {}
    turn_texts = _turn_texts(log, state.run_id)
    model = f" ({state.start.get('model')})" if state.start.get("model") else ""
    lines = [f"# Run {state.run_id}: {goal.problem} at shape {goal.shape}", "",
             f"State: **{live}**" + (f" ({ended.get('state')}: {ended.get('reason')})" if ended else ""),
             f"Policy: {state.start.get('policy')}{model}",
             "", "## Goal", "", "```text", str(state.start.get("goal", "")), "```", "", "## Baseline", ""]
    if state.baseline is not None:
        lines.append(f"{state.baseline[0]}: {fmt_us(state.baseline[1])} us median.")
    else:
        lines.append("Not measured in this run (no timed profile: on a CPU the kernels are only checked).")
    lines += ["", "## Best kernel", "", f"This run's best verified attempt: {best_line(state)}."]
    elsewhere = log_best_line(state)
    if elsewhere is not None:
        lines.append(f"Best verified attempt in the whole log (any run): {elsewhere}.")
    if state.first_best is not None and state.first_best is not state.best:
        lines.append(f"At the start of the run the best in the log was: {state.first_best.numbers()}.")
    if state.best_source:
        lines += ["", "```python", state.best_source.rstrip(), "```"]
    lines += ["", "## Progress", "", "![best so far over time and steps](progress.png)", "",
              "| step | tool | outcome | median us | speedup | proposed as |",
              "| ---: | --- | --- | ---: | ---: | --- |"]
    rows = [a for a in state.attempts if a.step is not None]
    if len(rows) > TABLE_ROWS:
        lines.append(f"| ... | | {len(rows) - TABLE_ROWS} earlier attempts | | | |")
        rows = rows[-TABLE_ROWS:]
    for a in rows:
        us = fmt_us(a.median_us) if a.median_us is not None else "-"
        sp = f"{a.speedup:.3g}" if a.speedup is not None else "-"
        why = turn_texts.get(a.step or 0, "").replace("|", "\\|")[:140]
        outcome = a.outcome + (f" ({a.error_class})" if a.error_class and a.error_class != a.outcome else "")
        lines.append(f"| {a.step} | {a.tool} | {outcome} | {us} | {sp} | {why} |")
    lines += ["", "## Strategies tried", ""]
    own_notes = [n for n in state.notes if n.run_id == state.run_id]
    if own_notes:
        lines += [f"- note #{n.id}" + (f" [{', '.join(n.tags)}]" if n.tags else "") + f": {' '.join(n.text.split())}"
                  for n in own_notes]
    else:
        lines.append("- no notes recorded in this run")
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


def _turn_texts(log: Any, run_id: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for ev in log.events(run_id=run_id, kinds=["model.turn"]):
        text = (ev.payload.get("text") or "").strip()
        first = text.splitlines()[0] if text else ""
        for c in ev.payload.get("calls", []):
            out[int(c["step"])] = first
    return out


def write_report(log: Any, run_id: str, out: Path) -> Path:
    """Write out/progress.png and out/report.md for a run; returns the folder."""
    state = RunState.load(log, run_id)
    out.mkdir(parents=True, exist_ok=True)
    plot(state, out / "progress.png")
    (out / "report.md").write_text(markdown(log, state), encoding="utf-8")
    return out
