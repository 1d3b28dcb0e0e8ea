"""The size limit on an HTTP request body, answered as a JSON-RPC error.

The SDK's streamable HTTP app refuses bodies above 4 MiB with a plain-text 413, which an MCP client
can only report as "Server returned an error response". That limit is also below what the service
accepts: a candidate source may hold 1 MiB (server.service.MAX_SOURCE_BYTES), and JSON escapes a
control character as \\u00XX, six bytes for one. So the limit here fits the largest source the
service accepts, however it is escaped, with a megabyte for the rest of the request; a larger body
is answered 413 with a JSON-RPC error (INVALID_REQUEST) that the SDK's client surfaces as the
call's error. stdio has no limit of its own: there the service's check is the only one.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from mcp_types import INVALID_REQUEST
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.service import MAX_SOURCE_BYTES

JSON_ESCAPE_FACTOR = 6  # "\u0001" is six bytes for one
HTTP_MAX_BODY_BYTES = JSON_ESCAPE_FACTOR * MAX_SOURCE_BYTES + (1 << 20)


def too_large(limit: int, size: int | None) -> Response:
    """The 413 answer: a JSON-RPC error with no id (the body was never parsed), as the SDK answers a request it
    refuses before reading it (a wrong Accept or Content-Type)."""
    told = f"{size:,} bytes" if size is not None else "more than that"
    message = (f"request body too large: this server takes at most {limit:,} bytes over HTTP, the request had "
               f"{told}; a candidate source may hold at most {MAX_SOURCE_BYTES:,} bytes")
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    return Response(json.dumps(body), status_code=413, media_type="application/json")


class BodyLimit:
    """ASGI middleware: an HTTP request body above `limit` bytes is answered with `too_large`, before the app sees
    it. A declared Content-Length is checked first; a body without one is counted as it arrives and kept, then
    handed on whole (the SDK's app reads it whole anyway)."""

    def __init__(self, app: ASGIApp, limit: int = HTTP_MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await too_large(self.limit, declared)(scope, receive, send)
            return
        kept = await self._read(receive)
        if kept is None:
            await too_large(self.limit, None)(scope, receive, send)
            return

        async def replay() -> Message:
            return kept.popleft() if kept else await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> deque[Message] | None:
        """The request's messages up to the end of its body, or None once the body passes the limit."""
        kept: deque[Message] = deque()
        size = 0
        while True:
            message = await receive()
            kept.append(message)
            if message["type"] != "http.request":
                return kept
            size += len(message.get("body", b""))
            if size > self.limit:
                return None
            if not message.get("more_body", False):
                return kept


def _content_length(scope: Scope) -> int | None:
    value: Any = Headers(scope=scope).get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
