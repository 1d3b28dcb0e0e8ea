"""The conversation the model sees, rebuilt from the log: the first message, a summary, recent turns.

It is a view, never the record: the log keeps every turn and result; a compaction event says which
turns the view hides (events up to `cut_id`) and what summary stands in for them. So a resumed run
rebuilds exactly the conversation the killed one had: the first user message verbatim, the newest
summary, then every turn after the cut with its tool results, in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from client.policy import Message, ToolCall

RESULT_CHARS = 12_000  # the longest tool result the conversation shows (the log keeps it whole)
CLIPPED_CHARS = 2_000  # what a result is cut to when a compaction cannot otherwise shrink the context


def estimate_tokens(chars: int) -> int:
    """About four characters a token: close enough to decide when to compact."""
    return (chars + 3) // 4


def message_chars(m: Message) -> int:
    n = len(m.content) + 16
    for c in m.tool_calls:
        n += len(c.name) + len(c.id) + _args_chars(c.arguments) + 16
    return n


def _args_chars(args: dict[str, Any]) -> int:
    total = 0
    for k, v in args.items():
        total += len(k) + (len(v) if isinstance(v, str) else len(repr(v))) + 4
    return total


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n... [{len(text) - limit} characters not shown; the log keeps them] ...\n{text[-tail:]}"


@dataclass
class TurnEntry:
    """One model turn as shown: the assistant message, its tool results, and the loop's reply if any."""

    turn: int
    first_event_id: int
    last_event_id: int
    messages: list[Message] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    call_ids: dict[int, str] = field(default_factory=dict)  # step -> the id the assistant message gave the call
    chars: int = 0

    def add(self, message: Message, event_id: int) -> None:
        self.messages.append(message)
        self.chars += message_chars(message)
        self.last_event_id = max(self.last_event_id, event_id)


class Transcript:
    """first message + optional summary + turns after the newest compaction's cut."""

    def __init__(self, first: str) -> None:
        self.first = Message(role="user", content=first)
        self.summary: str | None = None
        self.cut_id = 0
        self.entries: list[TurnEntry] = []
        self._by_call: dict[str, TurnEntry] = {}

    # -- building ---------------------------------------------------------------------------------

    def add_turn(self, event_id: int, payload: dict[str, Any]) -> None:
        if event_id <= self.cut_id:
            return
        calls = tuple(ToolCall(c["id"], c["name"], c.get("arguments") or {}) for c in payload.get("calls", []))
        entry = TurnEntry(turn=int(payload.get("turn", len(self.entries) + 1)), first_event_id=event_id,
                          last_event_id=event_id)
        entry.add(Message(role="assistant", content=payload.get("text") or "", tool_calls=calls), event_id)
        entry.steps = [int(c["step"]) for c in payload.get("calls", [])]
        entry.call_ids = {int(c["step"]): str(c["id"]) for c in payload.get("calls", [])}
        if payload.get("nudge"):
            entry.add(Message(role="user", content=payload["nudge"]), event_id)
        self.entries.append(entry)
        for c in payload.get("calls", []):
            self._by_call[f"{c['step']}"] = entry

    def add_result(self, event_id: int, payload: dict[str, Any]) -> None:
        """A tool result, shown after the assistant message that asked for it."""
        if event_id <= self.cut_id:
            return
        step = int(payload["step"])
        entry = self._by_call.pop(str(step), None)
        if entry is None:  # its turn is hidden by a compaction (a result that landed after the cut)
            return
        entry.add(Message(role="tool", content=clip(payload.get("text", ""), RESULT_CHARS),
                          tool_call_id=entry.call_ids.get(step, f"call_{step}"), is_error=not payload.get("ok", False)),
                  event_id)

    def compact(self, cut_id: int, summary: str) -> None:
        """Hide every turn whose events all lie at or before cut_id; the summary stands in for them."""
        self.cut_id = cut_id
        self.summary = summary
        kept = [e for e in self.entries if e.first_event_id > cut_id]
        self.entries = kept
        live = {id(e) for e in kept}
        self._by_call = {k: v for k, v in self._by_call.items() if id(v) in live}

    def clip_results(self, limit: int = CLIPPED_CHARS) -> None:
        """Shorten long tool results of the turns still shown (a compaction that could not shrink enough)."""
        for entry in self.entries:
            for i, m in enumerate(entry.messages):
                if m.role == "tool" and len(m.content) > limit:
                    entry.chars -= message_chars(m)
                    entry.messages[i] = Message(role="tool", content=clip(m.content, limit),
                                                tool_call_id=m.tool_call_id, is_error=m.is_error)
                    entry.chars += message_chars(entry.messages[i])

    # -- reading ----------------------------------------------------------------------------------

    def summary_message(self) -> Message | None:
        if self.summary is None:
            return None
        return Message(role="user", content=self.summary)

    def messages(self) -> list[Message]:
        out = [self.first]
        summary = self.summary_message()
        if summary is not None:
            out.append(summary)
        for entry in self.entries:
            out.extend(entry.messages)
        return out

    def chars(self) -> int:
        n = message_chars(self.first) + sum(e.chars for e in self.entries)
        if self.summary is not None:
            n += len(self.summary) + 16
        return n

    @classmethod
    def from_events(cls, first: str, events: list[Any], compaction: Any | None) -> Transcript:
        """Rebuild from a run's model.turn and agent.result events (id order) and its newest compaction."""
        t = cls(first)
        if compaction is not None:
            t.cut_id = int(compaction.payload.get("cut_id", 0))
            t.summary = str(compaction.payload.get("summary", ""))
        for ev in events:
            if ev.kind == "model.turn":
                t.add_turn(ev.id, ev.payload)
            elif ev.kind == "agent.result":
                t.add_result(ev.id, ev.payload)
        return t
