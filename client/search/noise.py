"""Which trial is the best, measured well enough to say so, and how sure that is.

GPU timings drift (DESIGN.md section 5: 0.4% to 60% between runs of the same kernel), so one fast
profile is a lead, not a result. A timed trial faster than the current leader is profiled again before
it may lead (`to_confirm`); it leads once it has `needed` timed profiles, or once no further profile of
it can be sent (the loop answers a repeated call from the log, so each extra profile needs options of its
own: the timing mode made explicit, then the baseline named too). Its value is the median of its
profiles' medians; the report names the min, the max and the timer's own spread.

Confidence compares the leader with the runner-up: high when every profile of the leader is faster than
every profile of the runner-up by more than their combined spread, low when the gap is within that
spread, medium between.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from client.search.history import Trial


@dataclass(frozen=True)
class Standing:
    leader: Trial | None  # the best trial measured `needed` times (or as often as it can be)
    runner_up: Trial | None  # the next best timed trial
    to_confirm: Trial | None  # a timed trial faster than the leader that must be profiled again first


def timed(trials: Sequence[Trial]) -> list[Trial]:
    """Correct, timed trials, fastest first (ties: the earlier trial first)."""
    return sorted((t for t in trials if not t.failed and t.timings), key=lambda t: (t.value, t.order))


def standing(trials: Sequence[Trial], needed: int, can_remeasure: Callable[[Trial], bool]) -> Standing:
    """Walks the timed trials fastest first: the first measured `needed` times (or that cannot be measured
    again) leads; any faster one before it must be profiled again, the fastest first. `can_remeasure` is
    asked only about those faster ones (it renders a source: a search of thousands of trials must not ask
    it of every one)."""
    ranked = timed(trials)
    leader = to_confirm = None
    for t in ranked:
        if len(t.timings) < needed and can_remeasure(t):
            to_confirm = to_confirm or t
            continue
        leader = t
        break
    runner_up = next((t for t in ranked if t is not leader), None) if leader is not None else None
    return Standing(leader, runner_up, to_confirm)


def remeasure_options(trial: Trial) -> list[dict[str, Any]]:
    """Profile options for another measurement of a trial, in the order to use them: each makes a call the
    loop has not seen (it answers a repeated one from the log) and asks for the same timing as the first."""
    first = next((m for m in trial.measurements if m.ok and m.median_us is not None), None)
    if first is None:
        return []
    graph = first.mode == "cuda_graph"
    ladder: list[dict[str, Any]] = [{}, {"graph": graph}]
    if first.baseline:
        ladder.append({"graph": graph, "baseline": first.baseline})
    used = trial.used_options
    return [o for o in ladder if tuple((k, o[k]) for k in ("graph", "baseline") if k in o) not in used]


@dataclass(frozen=True)
class Confidence:
    level: str  # "high", "medium", "low", or "single" when there is nothing to compare with
    gap_pct: float | None  # how much faster the leader's median is than the runner-up's
    noise_pct: float  # the larger relative range of the two (profile to profile, or the timer's IQR)

    def text(self) -> str:
        if self.level == "single":
            return (f"no confidence yet: no other timed configuration to compare with (noise {self.noise_pct:.1f}%)")
        assert self.gap_pct is not None
        why = {"high": "every profile of it is faster than every profile of the runner-up by more than the noise",
               "medium": "ahead by more than the noise, but the profiles' ranges touch",
               "low": "the gap is within the noise"}[self.level]
        return (f"{self.level} confidence: {self.gap_pct:.1f}% ahead of the runner-up, noise {self.noise_pct:.1f}% "
                f"({why})")


def spread_pct(trial: Trial) -> float:
    """The trial's relative noise: the range of its profiles' medians, or the timer's IQR if larger."""
    times = trial.timings
    if not times:
        return 0.0
    mid = trial.value
    ranged = 100.0 * (max(times) - min(times)) / mid if mid > 0 else 0.0
    iqr = max((m.spread_pct or 0.0) for m in trial.measurements)
    return max(ranged, iqr)


def confidence(leader: Trial, runner_up: Trial | None) -> Confidence:
    if runner_up is None or not runner_up.timings:
        return Confidence("single", None, spread_pct(leader))
    gap = 100.0 * (runner_up.value - leader.value) / runner_up.value if runner_up.value > 0 else 0.0
    noise = max(spread_pct(leader), spread_pct(runner_up))
    if gap <= noise:
        level = "low"
    elif max(leader.timings) * (1 + noise / 100) < min(runner_up.timings):
        level = "high"
    else:
        level = "medium"
    return Confidence(level, gap, noise)


def describe_timing(trial: Trial) -> str:
    """"12.3 us (median of 2 profiles, 12.2-12.4 us, timer IQR up to 1.1%)"."""
    times = trial.timings
    if not times:
        return "untimed (no GPU)"
    n = len(times)
    iqr = max((m.spread_pct or 0.0) for m in trial.measurements)
    if n == 1:
        return f"{_us(times[0])} us (one profile, timer IQR {iqr:.1f}%)"
    return (f"{_us(trial.value)} us (median of {n} profiles, {_us(min(times))}-{_us(max(times))} us, "
            f"timer IQR up to {iqr:.1f}%)")


def _us(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"
