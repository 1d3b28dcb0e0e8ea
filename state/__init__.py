"""The SQLite event log: the single source of truth for what happened in every run.

Runs, tool calls (intent before, result after), attempts, notes, compactions and budgets are
append-only events; best-so-far, the attempt ledger and failure counts are queries over them.

    from state import EventLog, intent_key
    with EventLog() as log:                          # state_dir()/marathon.db
        sha = log.put_source(kernel_text)
        log.append("attempt", {...}, run_id="r1")
        log.best("mla_decode", "bench")

Event kinds and their payloads: state.events. Schema and migrations: state.schema.
"""

from __future__ import annotations

from .encoding import canonical_json, intent_key, source_sha
from .events import OUTCOMES
from .export import read_jsonl
from .log import Event, EventLog
from .paths import default_db_path, state_dir
from .schema import SCHEMA_VERSION, SchemaTooNewError

__all__ = [
    "OUTCOMES",
    "SCHEMA_VERSION",
    "Event",
    "EventLog",
    "SchemaTooNewError",
    "canonical_json",
    "default_db_path",
    "intent_key",
    "read_jsonl",
    "source_sha",
    "state_dir",
]
