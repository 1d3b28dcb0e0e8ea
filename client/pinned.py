"""The pinned block: the state of the run, rebuilt from the log before every model turn.

Where the summary of a compaction is the only memory, long runs drift; so every turn ends with this
block (goal, baseline, best kernel and its numbers, attempts and failures by class, the notes
ledger, the budget left), built from the RunState projection of the event log, never from the
conversation. It is the last message of each turn's context rather than part of the system prompt:
a system prompt that changed every turn would defeat the providers' prompt caching of the
conversation prefix. `pinned_dict` is the same state for policies without a model (the tuner).
"""

from __future__ import annotations

import time
from typing import Any

from client.run_projection import AttemptRec, RunState, fmt_us

STUCK_AFTER = 3  # consecutive failures of one class before the block names them
REPEAT_AFTER = 3  # consecutive identical calls before the block names them
NOTE_CHARS = 300


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def budget_line(state: RunState, now: float | None = None) -> str:
    assert state.goal is not None
    b = state.goal.budget
    spent = state.spend
    parts = [f"step {state.steps_started}" + (f" of {b.steps}" if b.steps is not None else "")]
    active = state.active_seconds(now, live=True)
    parts.append(f"{_hours(active)} active" + (f" of {b.hours:g} h" if b.hours is not None else ""))
    if spent.tokens or b.tokens is not None:
        parts.append(f"{spent.tokens:,} tokens" + (f" of {b.tokens:,}" if b.tokens is not None else ""))
    if spent.cost_usd or b.cost_usd is not None:
        parts.append(f"${spent.cost_usd:.2f}" + (f" of ${b.cost_usd:g}" if b.cost_usd is not None else ""))
    if state.goal.deadline is not None:
        parts.append(f"deadline in {_hours(max(0.0, state.goal.deadline - (now or time.time())))}")
    return "; ".join(parts)


def _attempt_line(rec: AttemptRec, run_id: str) -> str:
    where = f"step {rec.step} of this run" if rec.step is not None and rec.run_id == run_id else (
        "this run" if rec.run_id == run_id else f"run {rec.run_id or '-'}")
    ident = f"attempt #{rec.attempt_id}" if rec.attempt_id is not None else "an attempt"
    device = f" on {rec.device}" if rec.device else ""
    how = f", verified {rec.verification}" if rec.verification else ""
    return f"{ident} ({where}): {rec.numbers()}{device}{how}"


def best_line(state: RunState) -> str:
    """This run's own best verified attempt: the one the goal is checked against."""
    best = state.best
    if best is None:
        return "none yet in this run (no verified correct attempt of this run for this problem and shape)"
    return _attempt_line(best, state.run_id)


def log_best_line(state: RunState) -> str | None:
    """The best verified attempt of any run in the log, when it is not this run's best; else None."""
    rec = state.log_best
    if rec is None or rec is state.best:
        return None
    return _attempt_line(rec, state.run_id)


def pinned_text(state: RunState, now: float | None = None) -> str:
    """The block as the model reads it."""
    goal = state.goal
    assert goal is not None
    lines = [f"[pinned state, rebuilt from the event log before step {state.steps_started + 1}; "
             "it is newer than anything above]",
             f"Goal: `{goal.problem}` at shape `{goal.shape}`: {goal.target_text()} (the first message states "
             "the whole task)."]
    if state.baseline is not None:
        name, us, step = state.baseline
        lines.append(f"Baseline: {name} {fmt_us(us)} us" + (f" (measured with the profile at step {step})." if step
                                                          else " (from an earlier profile)."))
    else:
        lines.append("Baseline: not measured yet (the first timed profile reports it; CPU runs are not timed).")
    lines.append(f"Best so far in this run (verified; the goal is checked against it): {best_line(state)}.")
    elsewhere = log_best_line(state)
    if elsewhere is not None:
        lines.append(f"Best in the whole log (any run; it does not count for this run's goal): {elsewhere}.")
    met = state.goal_met()
    if goal.target_speedup is not None or goal.target_us is not None:
        lines.append("Target: met (" + met + ")." if met else "Target: not met yet.")
    n = len(state.attempts)
    if n:
        tools = ", ".join(f"{t} {c}" for t, c in sorted(state.attempt_tools.items()))
        outcomes = ", ".join(f"{o} {c}" for o, c in state.outcomes.most_common())
        lines.append(f"Attempts this run: {n} ({tools}): {outcomes}.")
    else:
        lines.append("Attempts this run: none yet.")
    if state.failures:
        lines.append("Failures by class: " + ", ".join(f"{c} {k}" for c, k in state.failures.most_common()) + ".")
    if state.streak >= STUCK_AFTER:
        err = f' (last: "{state.streak_error.splitlines()[0][:200]}")' if state.streak_error else ""
        lines.append(f"STUCK: the last {state.streak} attempts failed with {state.streak_class}{err}. Step back: "
                     "read the error, go back to the best kernel, try a different idea.")
    if state.repeat_count >= REPEAT_AFTER:
        lines.append(f"REPEATING: the last {state.repeat_count} calls were identical; their results will not "
                     "change. Do something else.")
    answered = state.status_counts.get("from_log", 0)
    if answered:
        lines.append(f"{answered} profile(s) of sources already tried were answered from the log, not re-run.")
    if state.notes:
        lines.append(f"Notes, the ledger of strategies and outcomes (newest first, {state.notes_total} in all):")
        for note in reversed(state.notes):
            tags = f" [{', '.join(note.tags)}]" if note.tags else ""
            text = " ".join(note.text.split())
            if len(text) > NOTE_CHARS:
                text = text[:NOTE_CHARS - 3] + "..."
            lines.append(f"- #{note.id}{tags}: {text}")
    else:
        lines.append("Notes: none yet. Record each strategy and its outcome with `note`, so it survives compaction.")
    lines.append(f"Budget: {budget_line(state, now)}.")
    return "\n".join(lines)


def pinned_dict(state: RunState, now: float | None = None) -> dict[str, Any]:
    """The same state, structured, for policies that read it instead of the text."""
    goal = state.goal
    assert goal is not None
    # "best": the kernel to build on: this run's own best verified attempt, else the log's ("scope" says
    # which). "run_best" is the run's own alone (what "goal_met" is decided from); "log_best" any run's.
    own = None if state.best is None else {**state.best.as_dict(), "source": state.best_source, "scope": "run"}
    whole = None if state.log_best is None else {**state.log_best.as_dict(), "source": state.log_best_source,
                                                 "scope": "log"}
    return {
        "run_id": state.run_id,
        "goal": goal.as_payload(),
        "step": state.steps_started,
        "best": own if own is not None else whole,
        "run_best": own,
        "log_best": whole,
        "baseline": None if state.baseline is None else {"name": state.baseline[0], "median_us": state.baseline[1]},
        "goal_met": state.goal_met(),
        "attempts": len(state.attempts),
        "outcomes": dict(state.outcomes),
        "failures": dict(state.failures),
        "stuck": {"class": state.streak_class, "count": state.streak} if state.streak >= STUCK_AFTER else None,
        "tried": state.tried,  # attempt_key -> AttemptRec: what a new profile would only repeat
        "notes": [{"id": n.id, "text": n.text, "tags": n.tags} for n in state.notes],
        "budget_left": state.budget_left(now, live=True),
    }
