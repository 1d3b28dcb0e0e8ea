"""Event: one logged event as a value, shared by the log that stores events and the export that
writes and reads them.

It lives apart from both so that each can import it at the top: state.log imports state.export (a
run's export is a method of the log), and state.export builds events back from a file without
reaching into the log.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    """One logged event. `existed` is True when an append found its key already stored and
    returned the stored event instead of writing a new one. `ts` is the wall clock at the append
    (unix seconds); the id, not ts, is the order of events."""

    id: int
    ts: float
    run_id: str | None
    kind: str
    payload: dict[str, Any]
    key: str | None = None
    existed: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (without `existed`, which describes an append, not the event)."""
        out = asdict(self)
        del out["existed"]
        return out
