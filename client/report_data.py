"""What a run's report shows, computed once from its RunState: one typed point per attempt.

The plot and the Markdown both read these points, so the figure and the table cannot disagree about
which attempt was the run's best or when it improved. The figure is the speedup over the baseline,
taken against one baseline time for the whole run (`run_baseline_us`); where no profile timed a
baseline it is the median time (lower is better); where nothing was timed at all (a CPU run: kernels
are only checked under the interpreter) the metric is "none" and the report says so in words.

"Best" is the log's rule (`AttemptRec.better_than`): only this run's verified correct attempts count,
the fastest median wins; an unverified attempt is drawn and tabulated but never becomes the best.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

from client.run_projection import AttemptRec, RunState, fmt_us

Metric = Literal["speedup", "median_us", "none"]


@dataclass(frozen=True)
class Point:
    """One attempt of the run, placed on both axes of the plot."""

    number: int  # its place among the run's attempts: 1, 2, 3, ...
    step: int  # the run's tool-call step that made it
    event_id: int | None  # the server's attempt event id (`attempt(id)`, `marathon log`)
    active_h: float  # hours of active time since the run started (gaps between sessions left out)
    tool: str
    outcome: str
    verified: bool
    value: float | None  # this attempt's own figure on the run's scale; None: not correct or not timed
    best: float | None  # the run's best-so-far after this attempt (verified attempts only)
    improved: bool  # this attempt became the run's best


@dataclass(frozen=True)
class Progress:
    """The run's attempts as the report draws them, and the reference lines drawn beside them."""

    run_id: str
    title: str
    metric: Metric
    base_name: str | None
    base_us: float | None
    points: tuple[Point, ...]
    start_best: float | None  # the best in the log before this run (another run's), on the same scale
    target: float | None  # the goal's target on the same scale, if it has one

    @property
    def timed(self) -> bool:
        """Whether anything can be drawn: some correct attempt of the run has a figure."""
        return self.metric != "none" and any(p.value is not None for p in self.points)

    @property
    def improvements(self) -> list[Point]:
        return [p for p in self.points if p.improved]

    def axis_label(self) -> str:
        if self.metric == "speedup":
            return f"speedup over {self.base_name or 'the baseline'} at {fmt_us(self.base_us or 0.0)} us (x)"
        return "median time (us, lower is better)"

    def figure(self, value: float) -> str:
        """A value on this run's scale as the report words it."""
        return f"{value:.3g}x" if self.metric == "speedup" else f"{fmt_us(value)} us"


def metric_of(attempts: list[AttemptRec]) -> Metric:
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


def value_of(rec: AttemptRec | None, metric: Metric, base_us: float | None = None) -> float | None:
    """An attempt's figure on the run's scale; None unless it is correct and timed."""
    if rec is None or rec.outcome != "correct":
        return None
    if metric == "speedup":
        return base_us / rec.median_us if base_us and rec.median_us else None
    return rec.median_us if metric == "median_us" else None


def best_series(attempts: list[AttemptRec], metric: Metric, start: AttemptRec | None,
                base_us: float | None = None) -> list[float | None]:
    """The figure of the run's best attempt after each attempt (None until a verified one is timed)."""
    return [best for _, best, _ in _walk(attempts, metric, start, base_us)]


def _walk(attempts: list[AttemptRec], metric: Metric, start: AttemptRec | None,
          base_us: float | None) -> list[tuple[float | None, float | None, bool]]:
    """(own figure, best-so-far figure, improved) after each attempt, by the log's rule of best."""
    best = start if value_of(start, metric, base_us) is not None else None
    out: list[tuple[float | None, float | None, bool]] = []
    for rec in attempts:
        own = value_of(rec, metric, base_us)
        improved = own is not None and rec.better_than(best)
        if improved:
            best = rec
        out.append((own, value_of(best, metric, base_us), improved))
    return out


def active_hours(state: RunState, stamps: list[float]) -> list[float]:
    """Hours of active time at each stamp: gaps between sessions (a crash, a pause) are left out."""
    if not state.sessions:
        t0 = stamps[0] if stamps else 0.0
        return [max(0.0, ts - t0) / 3600 for ts in stamps]
    return [sum(max(0.0, min(ts, last) - start) for start, last in state.sessions if ts > start) / 3600
            for ts in stamps]


def progress(state: RunState) -> Progress:
    """The run's attempts as points, with the baseline, the start line and the target on one scale."""
    attempts = [a for a in state.attempts if a.step is not None]
    metric = metric_of(attempts)
    base_us = run_baseline_us(attempts) if metric == "speedup" else None
    hours = active_hours(state, [a.ts for a in attempts])
    points = tuple(
        Point(number=state.number_of(a) or i, step=a.step or 0, event_id=a.attempt_id, active_h=h, tool=a.tool,
              outcome=a.outcome, verified=a.verified, value=own, best=best, improved=improved)
        for i, (a, h, (own, best, improved)) in enumerate(zip(attempts, hours, _walk(attempts, metric, None, base_us)),
                                                          start=1))
    goal = state.goal
    target = None
    if goal is not None:
        target = goal.target_speedup if metric == "speedup" else goal.target_us if metric == "median_us" else None
    title = f"run {state.run_id}: {goal.problem}/{goal.shape}" if goal else f"run {state.run_id}"
    return Progress(run_id=state.run_id, title=title, metric=metric,
                    base_name=next((a.baseline for a in attempts if a.baseline), None), base_us=base_us,
                    points=points, start_best=value_of(state.first_best, metric, base_us), target=target)
