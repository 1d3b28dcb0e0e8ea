"""A policy that plays back a script, for tests of the loop: no model, no network, same interface.

It records a snapshot of every context it was shown, so a test can assert what the loop would have
sent a model (the pinned block after a restart, the messages after compaction).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Literal

from client.policy import Turn, TurnContext

Step = Turn | BaseException


class ScriptedPolicy:
    """Returns `turns` in order (an exception in the list is raised instead), or asks a function.

    When a list runs out: `exhausted="raise"` (default) raises RuntimeError, so a loop that asks for more
    turns than the test expected fails loudly; "stop" returns a final turn with no tool calls.
    """

    def __init__(
        self,
        turns: Sequence[Step] | Callable[[TurnContext], Turn],
        *,
        name: str = "scripted",
        exhausted: Literal["raise", "stop"] = "raise",
    ) -> None:
        self.name = name
        self.model = name
        self.contexts: list[TurnContext] = []
        self._fn = turns if callable(turns) else None
        self._turns: list[Step] = [] if callable(turns) else list(turns)
        self._exhausted = exhausted
        self._next = 0

    @property
    def remaining(self) -> int:
        return len(self._turns) - self._next

    def next_turn(self, context: TurnContext) -> Turn:
        self.contexts.append(copy.deepcopy(context))  # the loop may mutate its lists afterwards
        if self._fn is not None:
            return self._fn(context)
        if self._next >= len(self._turns):
            if self._exhausted == "stop":
                return Turn(text="", stop_reason="end_turn", model=self.name)
            raise RuntimeError(f"scripted policy ran out of turns after {len(self._turns)}")
        step = self._turns[self._next]
        self._next += 1
        if isinstance(step, BaseException):
            raise step
        return step
