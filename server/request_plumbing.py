"""How a tool call runs: who is calling, blocking work off the event loop, progress, cancellation.

Service calls block for seconds to minutes (a worker process compiles, checks and times the
candidate), so each runs in a worker thread. Meanwhile a heartbeat sends a progress notification
whenever the job reports a new stage and at least every `heartbeat_s` seconds even when it reports
nothing: many clients drop a call that stays silent for about 60 s. When the client cancels the
request, the threading.Event handed to the Service is set, the pool kills and replaces the worker,
and the call waits (shielded, briefly) for the Service to log the cancelled result before the
cancellation propagates, so the event log never holds an intent without its result.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from state.keys import META_CALL, META_RUN, META_SESSION

log = logging.getLogger("marathon.server")

T = TypeVar("T")
Progress = Callable[[dict[str, Any]], None]

# `_meta` keys a client may set on a request (optional): the bundled client uses them to tie calls
# to its run and to make a retried call reuse its intent event.

# How long a cancelled call waits for the Service to stop the job and log the result.
CANCEL_GRACE_S = 30.0


@dataclass(frozen=True)
class Caller:
    """Who made a request, as recorded in the event log."""

    name: str
    session: str | None
    run_id: str | None
    call_id: str | None

    def client(self) -> dict[str, Any]:
        return {"name": self.name, "session": self.session}


def caller_of(ctx: Any, process_session: str | None, default_run: str | None) -> Caller:
    """The caller of this request, from the MCP request context.

    name: clientInfo.name from initialize (or the 2026 per-request envelope). session: the
    client's own choice in `_meta`, else the transport's session (Mcp-Session-Id on HTTP), else
    this server process's id on stdio and in memory, where one process serves one connection;
    stateless HTTP has no session, so None there.
    """
    name = "unknown"
    meta: dict[str, Any] = {}
    headers = None
    try:
        params = ctx.session.client_params
        if params is not None and params.client_info is not None:
            info = params.client_info
            name = info.name
        meta = dict(ctx.request_context.meta or {})
        headers = ctx.headers
    except (AttributeError, ValueError):  # outside a request (direct calls in tests)
        pass
    session = meta.get(META_SESSION)
    if not session and headers is not None:
        session = headers.get("mcp-session-id")
    if not session and headers is None:
        session = process_session
    run_id = meta.get(META_RUN) or default_run
    call_id = meta.get(META_CALL)
    return Caller(name=str(name)[:200], session=str(session)[:200] if session else None,
                  run_id=str(run_id) if run_id else None, call_id=str(call_id) if call_id else None)


def new_process_session(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class _Stage:
    """The newest progress message from the worker thread (written there, read on the loop)."""

    def __init__(self, label: str) -> None:
        self._lock = threading.Lock()
        self._text = f"{label}: started"
        self._serial = 0

    def update(self, message: dict[str, Any]) -> None:
        stage = str(message.get("stage") or "working")
        done, total = message.get("done"), message.get("total")
        text = f"{stage} {done}/{total}" if done is not None and total else stage
        with self._lock:
            self._text = text
            self._serial += 1

    def read(self) -> tuple[int, str]:
        with self._lock:
            return self._serial, self._text


async def run_blocking(ctx: Any, label: str, work: Callable[[Progress, threading.Event], T],
                       heartbeat_s: float, cancel_grace_s: float = CANCEL_GRACE_S) -> T:
    """Run `work(progress, cancel)` in a thread, with progress notifications and cancellation.

    cancel_grace_s: how long a cancelled call waits for `work` to honour `cancel` (0 for work that
    cannot be stopped: it finishes and logs its result in the background)."""
    stage = _Stage(label)
    cancel = threading.Event()
    finished = threading.Event()
    started = time.monotonic()

    def in_thread() -> T:
        try:
            return work(stage.update, cancel)
        finally:
            finished.set()

    async def notify(text: str, last: list[float]) -> None:
        elapsed = time.monotonic() - started
        value = max(round(elapsed, 1), last[0] + 0.1)  # progress must increase with every notification
        last[0] = value
        try:
            await ctx.report_progress(value, None, f"{text} ({elapsed:.0f} s)")
        except Exception as exc:  # a client that went away must not break the job
            log.debug("progress notification failed: %r", exc)

    async def heartbeat() -> None:
        last = [-0.1]
        seen, text = stage.read()
        await notify(text, last)
        sent_at = time.monotonic()
        while True:
            await anyio.sleep(min(1.0, heartbeat_s))
            serial, text = stage.read()
            if serial != seen or time.monotonic() - sent_at >= heartbeat_s:
                seen = serial
                await notify(text, last)
                sent_at = time.monotonic()

    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(heartbeat)
        try:
            result = await anyio.to_thread.run_sync(in_thread, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancel.set()
            log.info("%s cancelled by the client; stopping its job", label)
            with anyio.CancelScope(shield=True):
                deadline = time.monotonic() + cancel_grace_s
                while not finished.is_set() and time.monotonic() < deadline:
                    await anyio.sleep(0.05)
            raise
        except Exception as exc:  # raised below, outside the task group, so it is not wrapped in a group
            failure = exc
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result
