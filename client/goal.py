"""A run's goal: what to optimise, when it is done, and what it may spend.

The goal is fixed when a run starts and stored in its run.start event; every turn's pinned block
and the "is it done?" decision read it back from there, and `goal_text` is the run's first user
message, kept verbatim through every compaction. Done is decided from measured numbers in the log
(`Goal.met`), never from what the model says.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

RULES = """\
Rules (the tools enforce them; a violation is refused):
- A candidate is one Python file that defines `entry(*inputs)`, launches `@triton.jit` kernels (or Gluon
  `@gluon.jit` ones, which `profile` runs only where a GPU is) and returns the output(s). The kernels do the
  work, written in Triton.
- No kernel libraries (flash-attn, FLA, FlashInfer, xformers, CUTLASS, ...), no CUDA extensions, no torch
  compute ops; allocation, views and copies are fine.
- Outputs are computed on every call from the inputs given; inputs are not modified.
- Only `profile` measures: a speedup counts when the log holds it, not when it is claimed."""


@dataclass(frozen=True)
class Budget:
    """Limits on spend; None means no limit. Spend is reloaded from the log on resume, never reset."""

    hours: float | None = None  # wall time while the run is active (time between sessions is not counted)
    steps: int | None = None  # tool calls
    tokens: int | None = None  # model input + output tokens, compaction included
    cost_usd: float | None = None


@dataclass(frozen=True)
class Goal:
    problem: str
    shape: str = "bench"
    target_speedup: float | None = None  # done when the best measured speedup reaches this
    target_us: float | None = None  # or when the best measured median time falls to this
    deadline: float | None = None  # unix time after which the run stops, whatever the budget says
    budget: Budget = field(default_factory=Budget)
    instructions: str = ""  # extra words from the person who started the run, appended verbatim

    def as_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> Goal:
        budget = Budget(**{k: v for k, v in (data.get("budget") or {}).items() if k in Budget.__dataclass_fields__})
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "budget"}
        return cls(budget=budget, **fields)

    def extended(self, extend: dict[str, Any]) -> Goal:
        """This goal under the new limits of a `run.resume` event's `extend` (budget totals, deadline): the values
        it names replace the run's own; the others stay."""
        budget = {**asdict(self.budget), **{k: v for k, v in (extend.get("budget") or {}).items()
                                            if k in Budget.__dataclass_fields__}}
        deadline = extend["deadline"] if "deadline" in extend else self.deadline
        return replace(self, budget=Budget(**budget), deadline=deadline)

    def met(self, speedup: float | None, median_us: float | None) -> str | None:
        """Why the goal is met by these measured numbers (a sentence), or None when it is not."""
        if self.target_speedup is not None and speedup is not None and speedup >= self.target_speedup:
            return f"measured speedup {speedup:.3g}x reaches the target {self.target_speedup:.3g}x"
        if self.target_us is not None and median_us is not None and median_us <= self.target_us:
            return f"measured time {median_us:.4g} us reaches the target {self.target_us:.4g} us"
        return None

    def target_text(self) -> str:
        parts = []
        if self.target_speedup is not None:
            parts.append(f"at least {self.target_speedup:g}x the baseline's speed")
        if self.target_us is not None:
            parts.append(f"a median time of {self.target_us:g} us or less")
        return " or ".join(parts) if parts else "as fast as possible (no fixed target)"


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def budget_text(b: Budget) -> str:
    parts = []
    if b.hours is not None:
        parts.append(f"{b.hours:g} h of wall time")
    if b.steps is not None:
        parts.append(f"{b.steps} tool calls")
    if b.tokens is not None:
        parts.append(f"{b.tokens:,} model tokens")
    if b.cost_usd is not None:
        parts.append(f"${b.cost_usd:g} of model cost")
    return ", ".join(parts) if parts else "no limit set"


def goal_text(goal: Goal) -> str:
    """The first user message of a run: the whole task, stated once and never rewritten."""
    lines = [
        f"Goal: make the Triton kernel for problem `{goal.problem}` at shape `{goal.shape}` "
        f"{goal.target_text()}, and keep it correct.",
        f"Start from the best kernel in the log (`best`), else from problem://{goal.problem}/starter; read "
        f"problem://{goal.problem}/description for the contract.",
        f"Budget: {budget_text(goal.budget)}." + (f" Deadline: {_when(goal.deadline)}." if goal.deadline else ""),
        "The run stops by itself when the log shows the target met or the budget spent.",
        "",
        RULES,
        "",
        "How to work: compile to check resources, profile to check correctness and time it, note what each "
        "experiment taught (a strategy and its outcome; hypotheses to test next), change one thing at a time.",
    ]
    if goal.instructions.strip():
        lines += ["", goal.instructions.strip()]
    return "\n".join(lines)


SYSTEM = """\
You are a GPU kernel engineer optimising a Triton kernel for NVIDIA Hopper (H100/H200) through the
kernel-marathon tools. The run is long (up to a day, hundreds of tool calls); older turns of this
conversation are replaced by a summary from time to time, and the newest user message always carries a
pinned block rebuilt from the event log: the goal, the baseline, the best kernel so far with its numbers,
attempts and failures by class, your notes, and the budget left. Trust the pinned block over your memory.
Call tools to make progress; answer without a tool call only when you are finished."""
