"""server.body_limit.BodyLimit at the ASGI level: a body over the limit is answered 413 as JSON-RPC whether
its size is declared or only counted as it arrives, and a body within it reaches the app whole."""

from __future__ import annotations

import json
from typing import Any

import anyio
from mcp_types import INVALID_REQUEST

from server.body_limit import BodyLimit

LIMIT = 100


class Echo:
    """An app that answers 200 with the body it read."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def request(chunks: list[bytes], length: int | None) -> tuple[Echo, int, bytes]:
    app = Echo()
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    anyio.run(BodyLimit(app, LIMIT), scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return app, status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_a_declared_size_over_the_limit_is_refused_unread() -> None:
    app, status, body = request([b"x" * 10], length=LIMIT + 1)
    assert (app.calls, status) == (0, 413)
    error = json.loads(body)["error"]
    assert error["code"] == INVALID_REQUEST and "101 bytes" in error["message"] and "at most 100" in error["message"]


def test_a_streamed_body_is_counted_as_it_arrives() -> None:
    app, status, body = request([b"x" * 60, b"x" * 60], length=None)
    assert (app.calls, status) == (0, 413)
    assert json.loads(body)["error"]["code"] == INVALID_REQUEST


def test_a_body_within_the_limit_reaches_the_app_whole() -> None:
    app, status, body = request([b"a" * 50, b"b" * 50], length=None)
    assert (app.calls, status, body) == (1, 200, b"a" * 50 + b"b" * 50)
    app, status, body = request([b"c" * LIMIT], length=LIMIT)
    assert (app.calls, status, body) == (1, 200, b"c" * LIMIT)
