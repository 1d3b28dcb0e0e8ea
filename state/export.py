"""A run as JSON Lines: the portable form of a run (archive it, attach it to a report, diff two runs).

One JSON object per line, in event id order. Two record types:

- {"type": "event", "id", "ts", "run_id", "kind", "payload", "key"}: one per event of the run;
- {"type": "source", "sha256", "text"}: a kernel source, written once, on the line just before the
  first event whose payload names it with "source_sha", so a reader streaming the file always has
  a source before it is referred to. Sources are separate records (not inlined) because many
  events of a long run refer to the same few kernels.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO, Any, Protocol

from .record import Event

PAGE = 1000


class RunReader(Protocol):
    """What an export reads from a log (state.log.EventLog is one): named here rather than imported, so
    that the log can import this module at its top without the two importing each other."""

    def events(self, *, run_id: str | None = ..., after_id: int = ..., limit: int | None = ...) -> list[Event]: ...

    def source(self, sha: str) -> str | None: ...


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


def export_run(log: RunReader, run_id: str, fp: IO[str]) -> int:
    """Write every event of `run_id` and the sources they name to `fp`; returns lines written."""
    lines, after, seen = 0, 0, set()
    while True:
        page = log.events(run_id=run_id, after_id=after, limit=PAGE)
        for ev in page:
            sha = ev.payload.get("source_sha")
            if isinstance(sha, str) and sha not in seen:
                seen.add(sha)
                text = log.source(sha)
                if text is not None:
                    fp.write(_line({"type": "source", "sha256": sha, "text": text}))
                    lines += 1
            fp.write(_line({"type": "event", **ev.as_dict()}))
            lines += 1
        if len(page) < PAGE:
            return lines
        after = page[-1].id


def read_jsonl(lines: Iterable[str]) -> tuple[list[Event], dict[str, str]]:
    """Parse an export back into its events (in file order) and its sources (sha256 -> text)."""
    events: list[Event] = []
    sources: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record = json.loads(line)
        kind = record.pop("type", None)
        if kind == "event":
            events.append(Event(**record))
        elif kind == "source":
            sources[record["sha256"]] = record["text"]
        else:
            raise ValueError(f"line {n}: unknown record type {kind!r}")
    return events, sources
