"""The report's figure: the run's speedup over active time and over steps, improvements marked.

Two panels share one scale: every attempt is a marker (its outcome's shape and colour; a correct
attempt the judge did not verify is hollow, and one with no figure sits on the bottom edge), the
run's best-so-far is a step line, and every attempt that improved it is ringed and labelled with its
number in the run. Steps are tool calls, so the step axis has whole-number ticks only.

Only called for a run with something timed (`Progress.timed`): a run with nothing to draw is said in
words in report.md, never drawn as empty axes. matplotlib is imported when a figure is drawn, not when
the report module is, so `marathon --help` stays quick and a broken plotting install costs the figure
alone: the caller writes report.md with a note instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from client.report_data import Point, Progress

MARKERS: dict[str, tuple[str, str]] = {  # outcome -> (matplotlib marker, colour)
    "correct": ("o", "#2a9d3f"), "compiled": ("s", "#6c8ebf"), "incorrect": ("x", "#d62728"),
    "compile_error": ("^", "#ff7f0e"), "rejected": ("D", "#9467bd"), "timeout": ("v", "#8c564b"),
    "crashed": ("P", "#e377c2"), "error": ("*", "#7f7f7f"),
}
BEST = "#1f77b4"
IMPROVED = "#e3a008"
LABELLED = 12  # improvements labelled with their number per panel (the newest, when there are more)


def draw(progress: Progress, path: Path) -> None:
    """Draw the two panels into `path` as a PNG; the file appears only once the figure is complete."""
    from matplotlib.figure import Figure  # without pyplot: no global figure state, no GUI backend
    from matplotlib.ticker import MaxNLocator

    points = list(progress.points)
    hours = [p.active_h for p in points]
    unit, scale = ("hours", 1.0) if hours and max(hours) >= 2 else ("minutes", 60.0)
    fig = Figure(figsize=(12, 5.2), layout="constrained")
    ax_time, ax_step = fig.subplots(1, 2)
    _panel(ax_time, progress, [h * scale for h in hours])
    ax_time.set_xlabel(f"active {unit} since the start")
    _panel(ax_step, progress, [float(p.step) for p in points])
    ax_step.set_xlabel("step")
    ax_step.xaxis.set_major_locator(MaxNLocator(integer=True))
    title = progress.title
    if not any(p.best is not None for p in points):
        title += " (no verified attempt: no best so far)"
    known = [p.value for p in points if p.value is not None]
    if progress.target is not None and not _on_scale(progress.target, known):
        title += f" (target {progress.figure(progress.target)}: off this scale)"
    fig.suptitle(title)
    handles, names = ax_step.get_legend_handles_labels()  # both panels draw the same kinds of marks
    unique = dict(zip(names, handles))
    if unique:
        fig.legend(list(unique.values()), list(unique.keys()), loc="outside lower center", ncols=4, fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        fig.savefig(partial, dpi=110, format="png")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _panel(ax: Any, progress: Progress, xs: list[float]) -> None:
    points = list(progress.points)
    known = [p.value for p in points if p.value is not None]
    edge = min(known) * 0.95 if progress.metric == "speedup" else max(known) * 1.05
    curve = [(x, p.best) for x, p in zip(xs, points) if p.best is not None]
    if curve:
        ax.step([x for x, _ in curve] + [xs[-1]], [y for _, y in curve] + [curve[-1][1]], where="post", color=BEST,
                label="best so far (this run, verified)", zorder=2)
    if progress.start_best is not None:
        ax.axhline(progress.start_best, color=BEST, linestyle=":", linewidth=1, label="best in the log before this run")
    if progress.target is not None and _on_scale(progress.target, known):
        ax.axhline(progress.target, color="#999999", linestyle="--", linewidth=1, label="target")
    for x, p in zip(xs, points):
        _attempt(ax, x, p, edge)
    improved = [(x, p) for x, p in zip(xs, points) if p.improved and p.value is not None]
    if improved:
        ax.scatter([x for x, _ in improved], [p.value for _, p in improved], s=160, facecolors="none",
                   edgecolors=IMPROVED, linewidths=2, label="improved the best (attempt number)", zorder=4)
        for x, p in improved[-LABELLED:]:
            ax.annotate(f"{p.number}", (x, p.value), textcoords="offset points", xytext=(6, 6), fontsize=8,
                        color="#5a4000")
    ax.set_ylabel(progress.axis_label())
    if min(xs) >= 0:
        ax.set_xlim(left=0, right=max(xs) * 1.04 if max(xs) > 0 else 1)
    ax.grid(alpha=0.3)


def _on_scale(target: float, known: list[float]) -> bool:
    """Whether a target line fits beside the data: a target far beyond every figure would squash them
    all onto one line, so it is named in the title instead."""
    return bool(known) and min(known) / 3 <= target <= max(known) * 3


def _attempt(ax: Any, x: float, p: Point, edge: float) -> None:
    marker, colour = MARKERS.get(p.outcome, ("*", "#000000"))
    if p.value is None:
        ax.scatter([x], [edge], marker=marker, color=colour, s=30, alpha=0.5, zorder=3,
                   label=f"{p.outcome} (no figure: drawn at the edge)")
    elif p.verified:
        ax.scatter([x], [p.value], marker=marker, color=colour, s=36, zorder=3, label=f"{p.outcome}, verified")
    else:
        ax.scatter([x], [p.value], marker=marker, facecolors="none", edgecolors=colour, s=36, zorder=3,
                   label=f"{p.outcome}, not verified")
