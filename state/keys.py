"""The event log's idempotency keys and the MCP `_meta` names: one definition for the writer and the reader.

The server writes a `tool.intent` under a key that holds the client's call id, and the client, resuming after
a crash, finds the server's record of its call by that key; the loop writes `agent.result` and `compaction` under
keys that make a replayed step a no-op. A format changed on one side only would make recovery silently miss what
the log holds, so both sides build and parse keys here. The `_meta` names are how a client tells the server which
run and call a request belongs to (the server logs under them).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

META_RUN = "kernel-marathon/run"  # the run a tool call belongs to
META_SESSION = "kernel-marathon/session"  # the client's own session name (else the transport's)
META_CALL = "kernel-marathon/call_id"  # the client's id for one call, kept across its retries

NO_RUN = "-"  # the run field of an intent key written outside any run


def intent(run_id: str | None, call_id: str, args_digest: str) -> str:
    """The key of the server's `tool.intent` for one call."""
    return f"intent:{run_id or NO_RUN}:{call_id}:{args_digest}"


def intent_prefix(run_id: str | None, call_id: str | None = None) -> str:
    """What every intent key of this run's call starts with, whatever the call's arguments (of any of the run's
    calls, without a call id)."""
    run = f"intent:{run_id or NO_RUN}:"
    return run if call_id is None else f"{run}{call_id}:"


def tool_result(intent_id: int) -> str:
    """The key of the `tool.result` (server) or interruption record (client) that closes an intent."""
    return f"result:{intent_id}"


def agent_result(run_id: str, step: int) -> str:
    return f"result:{run_id}:{step}"


def run_start(run_id: str) -> str:
    return f"run.start:{run_id}"


def compaction(run_id: str, cut_id: int) -> str:
    return f"compaction:{run_id}:{cut_id}"


def census(source_sha: str, problem: str, shape: str, device: Any) -> str:
    return f"census:{source_sha}:{problem}:{shape}:{device}"


def baseline(fields: dict[str, Any]) -> str:
    """A baseline timing's cache key: everything the timing depends on (problem, shape, GPU, driver, versions)."""
    return "baseline:" + hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
