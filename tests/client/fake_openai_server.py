"""A real HTTP server on 127.0.0.1 that plays scripted model replies, for tests without a network.

The providers talk to it through the real `openai` and `anthropic` SDKs, so a test exercises what
runs in production: the SDK's request building, retries and error classes, over a real socket.
It speaks enough Chat Completions (POST /v1/chat/completions) and Anthropic Messages (POST
/v1/messages) for the providers' round trips, and fails on demand: an error status with
Retry-After, a slow answer, a connection closed without a reply. It records every request so a
test can check headers and bodies. It is bounded: it stops on leaving its `with` block and, in
any case, after `max_lifetime_s`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
MESSAGES_PATHS = frozenset({"/v1/messages"})


@dataclass
class Reply:
    """One scripted answer. `drop`: close the connection without a word; `delay_s`: answer late."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    delay_s: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw) if self.raw else None


def chat_completion(
    content: str | None = None,
    tool_calls: Sequence[tuple[str, Any] | tuple[str, str, Any]] = (),
    *,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    finish_reason: str | None = None,
    model: str = "fake-model",
) -> Reply:
    """A Chat Completions reply. tool_calls: (name, arguments) or (id, name, arguments); dict arguments
    are sent as JSON text, str arguments verbatim (so a test can send broken JSON)."""
    calls = []
    for i, spec in enumerate(tool_calls):
        call_id, name, args = spec if len(spec) == 3 else (f"call_{i}", *spec)
        calls.append({"id": call_id, "type": "function",
                      "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}})
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    body = {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": finish_reason or ("tool_calls" if calls else "stop")}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
    return Reply(body=body)


def anthropic_message(
    text: str | None = None,
    tool_uses: Sequence[tuple[str, str, Any]] = (),
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    stop_reason: str | None = None,
    model: str = "fake-claude",
    usage_extra: Mapping[str, int] | None = None,
) -> Reply:
    """A Messages API reply; tool_uses: (id, name, input)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": inp} for i, n, inp in tool_uses]
    body = {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop_reason or ("tool_use" if tool_uses else "end_turn"), "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens, **(usage_extra or {})},
    }
    return Reply(body=body)


def error_reply(status: int, message: str, *, retry_after: str | None = None, retry_after_ms: int | None = None,
                kind: str = "error", anthropic: bool = False) -> Reply:
    """An API error in the provider's shape, optionally with Retry-After (the SDKs also read retry-after-ms,
    which lets a test make their retries quick)."""
    body: dict[str, Any] = {"error": {"type": kind, "message": message}}
    if anthropic:
        body["type"] = "error"
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    if retry_after_ms is not None:
        headers["retry-after-ms"] = str(retry_after_ms)
    return Reply(status=status, body=body, headers=headers)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet in test output
        pass

    def do_GET(self) -> None:
        self._answer(self.server.fake.handle("GET", self.path, dict(self.headers.items()), b""))

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        self._answer(self.server.fake.handle("POST", self.path, dict(self.headers.items()), raw))

    def _answer(self, reply: Reply) -> None:
        if reply.delay_s:
            self.server.fake.halting.wait(reply.delay_s)
        if reply.drop:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        body = reply.body if isinstance(reply.body, bytes) else (
            reply.body.encode() if isinstance(reply.body, str) else json.dumps(reply.body).encode())
        try:
            self.send_response(reply.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up (timeout): nothing to do
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeModelServer


class FakeModelServer:
    """Scripted Chat Completions / Messages server on a free port of 127.0.0.1.

    Replies are served in order from one queue, whichever endpoint is called; with the queue empty the
    server answers 418 (not retryable), so a test that expects fewer calls fails at once.
    """

    def __init__(self, replies: Iterable[Reply] = (), *, max_lifetime_s: float = 60.0,
                 max_requests: int = 10_000) -> None:
        self.requests: list[RecordedRequest] = []
        self.stopped = threading.Event()  # set once the socket is closed
        self.halting = threading.Event()  # set as stopping begins: wakes delayed replies
        self.max_lifetime_s = max_lifetime_s
        self.max_requests = max_requests
        self._replies: deque[Reply] = deque(replies)
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._threads: list[threading.Thread] = []

    # -- scripting ------------------------------------------------------------------------------------

    def push(self, *replies: Reply) -> FakeModelServer:
        with self._lock:
            self._replies.extend(replies)
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def handle(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> Reply:
        route = path.split("?", 1)[0]
        with self._lock:
            if len(self.requests) >= self.max_requests:
                return Reply(status=503, body={"error": {"message": "fake server: request limit reached"}},
                             headers={"x-should-retry": "false"})
            self.requests.append(RecordedRequest(method, route, {k.lower(): v for k, v in headers.items()}, raw))
            if method != "POST" or route not in CHAT_PATHS | MESSAGES_PATHS:
                return Reply(status=404, body={"error": {"type": "not_found", "message": f"no route {route}"}})
            if not self._replies:
                return Reply(status=418, body={"error": {"type": "fake", "message": "no scripted reply left"}})
            return self._replies.popleft()

    # -- life -----------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("fake server not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def start(self) -> FakeModelServer:
        if self._server is not None:
            return self
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        serve = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                 name="fake-model-server", daemon=True)
        watchdog = threading.Thread(target=self._expire, name="fake-model-server-watchdog", daemon=True)
        self._threads = [serve, watchdog]
        serve.start()
        watchdog.start()
        return self

    def _expire(self) -> None:
        if not self.halting.wait(self.max_lifetime_s):
            self.stop()

    def stop(self) -> None:
        with self._lock:
            if self.halting.is_set():
                return
            self.halting.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.stopped.set()

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
