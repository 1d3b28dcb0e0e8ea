"""The search's trials, folded from the event log: the log is the only record of what was tried.

A trial is one configuration of the space with every measurement of it: the profiles of this run (its
agent.call, which holds the source sent, and its agent.result, which holds the verdict, the numbers or
the timeout) and the profile attempts of other runs and agents (`attempt` events, their sources in the
log's source store). A source counts when it is a variant of the search's base kernel (`Variants`): its
configuration is read back from the text, so nothing about the search is kept anywhere but in the log,
and a resumed run, or a new run on the same log, rebuilds the same trials in the same order.

Values for the optimiser (lower is better): a failed trial (any measurement not correct: a compile error,
a wrong result, a refusal, a timeout) is PENALTY; a correct one without timing (the CPU interpreter) is
UNTIMED; a timed one is the median of its measured medians.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from client.search.source import Config, Variants
from client.search.space import Key, SearchSpace

PENALTY = 1e12  # a failed trial: worse than any time
UNTIMED = 1e9  # correct but not timed: better than a failure, worse than any measured time
PROFILE_OPTIONS = ("graph", "baseline")  # the profile arguments that make a second measurement a new call


@dataclass(frozen=True)
class Measurement:
    """One profile of a trial's source."""

    outcome: str  # the attempt's outcome ("correct", "compile_error", ...); "timeout"/"error" when none was judged
    median_us: float | None = None
    spread_pct: float | None = None  # the timer's interquartile range as a share of the median
    mode: str | None = None  # how it was timed ("cuda_graph", "eager")
    baseline: str | None = None  # the baseline it was timed against
    options: tuple[tuple[str, Any], ...] = ()  # the profile options the call set (PROFILE_OPTIONS)
    step: int | None = None  # this run's step; None for another run's attempt
    attempt_id: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "correct"


@dataclass
class Trial:
    """One configuration and everything measured of it, in log order."""

    config: Config
    key: Key
    order: int  # position in the history: the order of first observation
    measurements: list[Measurement] = field(default_factory=list)
    used_options: set[tuple[tuple[str, Any], ...]] = field(default_factory=set)  # profile options already sent

    @property
    def failed(self) -> bool:
        return any(not m.ok for m in self.measurements)

    @property
    def failure(self) -> str | None:
        """The first failing measurement's outcome (its class of failure)."""
        return next((m.outcome for m in self.measurements if not m.ok), None)

    @property
    def timings(self) -> list[float]:
        return [m.median_us for m in self.measurements if m.ok and m.median_us is not None]

    @property
    def value(self) -> float:
        if self.failed:
            return PENALTY
        times = self.timings
        return float(statistics.median(times)) if times else UNTIMED

    @property
    def own(self) -> bool:
        """Measured by this run at least once."""
        return any(m.step is not None for m in self.measurements)


class LogHistory:
    """The trials of one search (a base kernel and its space, at one problem and shape), kept up to date
    from the log by `refresh()`: each call reads only the events written since the last."""

    def __init__(self, log: Any, run_id: str, problem: str, shape: str, space: SearchSpace,
                 variants: Variants) -> None:
        self.log = log
        self.run_id = run_id
        self.problem = problem
        self.shape = shape
        self.space = space
        self.variants = variants
        self.trials: list[Trial] = []
        self.by_key: dict[Key, Trial] = {}
        self.notes: list[str] = []  # the texts of this run's note calls
        self.outside = 0  # variants of the base whose values are not choices of the space
        self._cursor = 0
        self._calls: dict[int, dict[str, Any]] = {}  # step -> this run's profile agent.call payload, until its result
        self._by_sha: dict[str, Config | None] = {}

    def refresh(self) -> int:
        """Fold the events written since the last refresh; returns how many measurements were added."""
        events = self.log.events(kinds=["agent.call", "agent.result", "attempt"], after_id=self._cursor)
        added = 0
        for ev in events:
            self._cursor = max(self._cursor, ev.id)
            if ev.kind == "attempt":
                added += self._foreign(ev)
            elif ev.run_id == self.run_id and ev.kind == "agent.call":
                self._call(ev.payload)
            elif ev.run_id == self.run_id and ev.kind == "agent.result":
                added += self._result(ev.payload)
        return added

    # -- this run's steps ----------------------------------------------------------------------------

    def _call(self, p: dict[str, Any]) -> None:
        args = p.get("args") or {}
        if p.get("tool") == "note" and isinstance(args.get("text"), str):
            self.notes.append(args["text"])
        elif (p.get("tool") == "profile" and isinstance(args.get("source"), str)
              and args.get("problem") == self.problem and (args.get("shape") or "bench") == self.shape):
            self._calls[int(p["step"])] = p

    def _result(self, p: dict[str, Any]) -> int:
        call = self._calls.pop(int(p.get("step", -1)), None)
        if call is None:
            return 0
        args = call.get("args") or {}
        config = self.variants.config_of(args["source"])
        if config is None:
            return 0
        options = tuple((k, args[k]) for k in PROFILE_OPTIONS if args.get(k) is not None)
        structured = p.get("structured") or {}
        if p.get("status") == "from_log":
            repeat = structured.get("repeat_of")
            measurement = _from_record(repeat if isinstance(repeat, dict) else {}, options, None)
            return self._add(config, measurement, options, only_if_new=True)
        attempt = p.get("attempt")
        step = int(p["step"])
        if isinstance(attempt, dict):
            found = structured.get("timing")
            timing: dict[str, Any] = found if isinstance(found, dict) else {}
            measurement = Measurement(
                outcome=str(attempt.get("outcome") or "error"), median_us=_num(attempt.get("median_us")),
                spread_pct=_num(timing.get("spread_pct")), mode=timing.get("mode"), baseline=attempt.get("baseline"),
                options=options, step=step, attempt_id=attempt.get("attempt_id"), error=attempt.get("error"))
        elif p.get("status") == "timeout":
            measurement = Measurement("timeout", options=options, step=step, error=str(p.get("text") or "")[:300])
        elif p.get("status") == "tool_error":
            measurement = Measurement("error", options=options, step=step, error=str(p.get("text") or "")[:300])
        else:
            return 0  # interrupted, disconnected, refused by the client: nothing was judged; it may be tried again
        return self._add(config, measurement, options)

    # -- other runs' attempts ------------------------------------------------------------------------

    def _foreign(self, ev: Any) -> int:
        p = ev.payload
        if (ev.run_id == self.run_id or p.get("tool") != "profile" or p.get("problem") != self.problem
                or p.get("shape") != self.shape or not p.get("source_sha")):
            return 0
        sha = str(p["source_sha"])
        if sha not in self._by_sha:
            text = self.log.source(sha)
            self._by_sha[sha] = self.variants.config_of(text) if text is not None else None
        config = self._by_sha[sha]
        if config is None:
            return 0
        measurement = Measurement(
            outcome=str(p.get("outcome") or "error"), median_us=_num(p.get("median_us")),
            spread_pct=_num(p.get("spread_pct")), mode=p.get("timing_mode"), baseline=p.get("baseline"),
            attempt_id=ev.id, error=p.get("error"))
        return self._add(config, measurement, ())

    # -- folding -------------------------------------------------------------------------------------

    def _add(self, config: Config, m: Measurement, options: tuple[tuple[str, Any], ...],
             only_if_new: bool = False) -> int:
        if not self.space.contains(config):
            self.outside += 1
            return 0
        key = self.space.key(config)
        trial = self.by_key.get(key)
        if trial is None:
            trial = Trial(self.space.config(key), key, len(self.trials))
            self.trials.append(trial)
            self.by_key[key] = trial
        elif only_if_new:
            trial.used_options.add(options)
            return 0
        trial.used_options.add(options)
        trial.measurements.append(m)
        return 1

    # -- summaries -----------------------------------------------------------------------------------

    def failures(self) -> Counter[str]:
        return Counter(t.failure for t in self.trials if t.failure is not None)

    def failures_text(self) -> str:
        """"compile_error 2, timeout 1": the failed trials by class, most first (ties by name)."""
        return ", ".join(f"{k} {v}" for k, v in sorted(self.failures().items(), key=lambda kv: (-kv[1], kv[0])))

    def counts(self) -> tuple[int, int, int]:
        """(trials, correct, failed)."""
        failed = sum(1 for t in self.trials if t.failed)
        return len(self.trials), len(self.trials) - failed, failed


def _from_record(rec: dict[str, Any], options: tuple[tuple[str, Any], ...], step: int | None) -> Measurement:
    return Measurement(outcome=str(rec.get("outcome") or "error"), median_us=_num(rec.get("median_us")),
                       baseline=rec.get("baseline"), options=options, step=step, attempt_id=rec.get("attempt_id"),
                       error=rec.get("error"))


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None
