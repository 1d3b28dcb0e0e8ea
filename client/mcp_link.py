"""The client's connection to the MCP server: the same protocol any other agent uses.

Three ways to reach a server: spawn `marathon serve` over stdio (the default: `sys.executable -m
cli serve`, with PYTHONPATH, MARATHON_HOME, CUDA_VISIBLE_DEVICES and TRITON_* passed
explicitly, since stdio clients pass few variables on their own), a streamable-HTTP URL with a bearer
token read from an environment variable, or an MCPServer object in this process (tests, benchmarks).

Failure handling, so one bad call never ends a run:
- every call has its own timeout, separate from the connection's start-up timeout; a call that
  times out is abandoned and the connection is rebuilt (a spawned server is restarted), since a
  server that stopped answering one call may answer nothing else;
- when the connection breaks (the server crashed), the next use reconnects, with back-off, and
  lists the tools again; the caller learns that the call it was making may or may not have run
  (LinkDown) and decides from the log whether to repeat it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio

from client.policy import ToolSpec
from state.keys import META_CALL, META_RUN, META_SESSION

log = logging.getLogger("marathon.client")


ROOT = Path(__file__).resolve().parent.parent
PASS_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
            "LD_LIBRARY_PATH", "VIRTUAL_ENV")
PASS_PREFIXES = ("TRITON_", "MARATHON_", "NVIDIA_")
BLOCKED = ("MARATHON_TOKEN",)  # the HTTP secret has no business in a stdio server's environment

# The client offers this tool besides the server's: MCP resources (the starter, the description, the
# best kernel) are read through it, so a model reaches them the same way it reaches the tools.
READ_RESOURCE = ToolSpec(
    name="read_resource",
    description="Read an MCP resource of the server, e.g. problem://softmax/starter (a correct kernel to start "
                "from), problem://softmax/description (the contract), problem://softmax/reference, "
                "best://softmax/bench (the best kernel so far).",
    input_schema={"type": "object", "properties": {"uri": {"type": "string", "description": "resource URI"}},
                  "required": ["uri"]},
)


class LinkDown(Exception):
    """The connection broke during a call, or the server cannot be reached; the call may have run."""


class CallTimeout(Exception):
    """The server did not answer one call in time; the connection has been rebuilt."""


@dataclass
class ServerSpec:
    """Where the server is. Exactly one of url, app, or (default) a spawned stdio server."""

    url: str | None = None
    token_env: str = "MARATHON_TOKEN"
    app: Any = None
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    errlog: Path | None = None  # where a spawned server's stderr goes

    def describe(self) -> dict[str, Any]:
        """What run.start records (no secrets): enough for `marathon resume` to reconnect."""
        if self.url:
            return {"kind": "http", "url": self.url, "token_env": self.token_env}
        if self.app is not None:
            return {"kind": "in-process"}
        return {"kind": "stdio", "command": self.command or default_command()}


def default_command() -> list[str]:
    return [sys.executable, "-m", "cli", "serve"]


def server_env(run_id: str | None = None, home: Path | None = None) -> dict[str, str]:
    """The environment of a spawned `marathon serve`, built explicitly (stdio passes few variables)."""
    env = {k: v for k, v in os.environ.items()
           if (k in PASS_ENV or k.startswith(PASS_PREFIXES)) and k not in BLOCKED}
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    if home is not None:
        env["MARATHON_HOME"] = str(home)
    if run_id:
        env["MARATHON_RUN_ID"] = run_id
    return env


@dataclass
class ToolAnswer:
    ok: bool
    text: str
    structured: dict[str, Any] | None = None


class Link:
    """One MCP connection, rebuilt when it breaks. Use from a single task: `async with Link(spec) as link`."""

    def __init__(self, spec: ServerSpec, *, run_id: str | None = None, client_name: str = "marathon-client",
                 connect_timeout: float = 180.0, reconnect_tries: int = 5, backoff_s: float = 1.0) -> None:
        self.spec = spec
        self.run_id = run_id
        self.client_name = client_name
        self.session = f"client-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.connect_timeout = connect_timeout
        self.reconnect_tries = reconnect_tries
        self.backoff_s = backoff_s
        self.tools: list[ToolSpec] = []
        self.annotations: dict[str, dict[str, Any]] = {}
        self.connects = 0
        self._client: Any = None
        self._stack: AsyncExitStack | None = None
        self._errlog: IO[str] | None = None
        self._broken = False

    async def __aenter__(self) -> Link:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- connection ---------------------------------------------------------------------------------

    def _transport(self) -> Any:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        spec = self.spec
        if spec.app is not None:
            return spec.app
        if spec.url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            token = os.environ.get(spec.token_env, "").strip()
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return streamable_http_client(spec.url, http_client=create_mcp_http_client(headers=headers))
        command = spec.command or default_command()
        env = spec.env or server_env(self.run_id)
        params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=os.getcwd())
        if spec.errlog is not None:
            spec.errlog.parent.mkdir(parents=True, exist_ok=True)
            self._errlog = open(spec.errlog, "a", encoding="utf-8")
            return stdio_client(params, errlog=self._errlog)
        return stdio_client(params)

    async def connect(self) -> None:
        """Connect (start the server if spawned) and list the tools, within connect_timeout."""
        from mcp import Client
        from mcp.types import Implementation

        await self.close()
        stack = AsyncExitStack()
        try:
            # No cancel scope around entering the client (its task group must outlive this block); the
            # handshake is bounded by the session's read timeout instead, the listing by fail_after.
            client = Client(self._transport(), client_info=Implementation(name=self.client_name, version="1"),
                            read_timeout_seconds=self.connect_timeout)
            self._client = await stack.enter_async_context(client)
            with anyio.fail_after(self.connect_timeout):
                listed = await self._client.list_tools()
        except BaseException:
            with contextlib.suppress(Exception):
                await stack.aclose()
            self._close_errlog()
            raise
        self._stack = stack
        self._broken = False
        self.connects += 1
        self.tools = [ToolSpec(t.name, t.description or "", dict(t.input_schema)) for t in listed.tools]
        self.annotations = {t.name: (t.annotations.model_dump() if t.annotations else {}) for t in listed.tools}

    async def close(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            # Not inside a cancel scope of our own: the client's task group must be exited in the scope it
            # was entered in. A spawned server is terminated (then killed) by the stdio transport itself.
            with contextlib.suppress(Exception):
                await stack.aclose()
        self._close_errlog()

    def _close_errlog(self) -> None:
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None

    async def ensure(self) -> None:
        """Reconnect after a break, with back-off; LinkDown when the server stays unreachable."""
        if self._client is not None and not self._broken:
            return
        delay = self.backoff_s
        last: BaseException | None = None
        for attempt in range(self.reconnect_tries):
            try:
                await self.connect()
                log.info("connected to the server (connection %d)", self.connects)
                return
            except Exception as exc:
                last = exc
                log.warning("cannot reach the server (try %d of %d): %r", attempt + 1, self.reconnect_tries, exc)
                await anyio.sleep(delay)
                delay = min(delay * 2, 30.0)
        raise LinkDown(f"the server cannot be reached after {self.reconnect_tries} tries: {last!r}")

    # -- calls --------------------------------------------------------------------------------------

    def meta(self, call_id: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {META_SESSION: self.session}
        if self.run_id:
            meta[META_RUN] = self.run_id
        if call_id:
            meta[META_CALL] = call_id
        return meta

    async def call(self, name: str, args: dict[str, Any], *, call_id: str | None, timeout: float) -> ToolAnswer:
        """One tool call. CallTimeout or LinkDown when no answer came (the call may have run)."""
        await self.ensure()
        try:
            # The session's own per-request timeout answers first (the connection stays usable); the
            # outer limit is a backstop for a transport that stops delivering even that.
            with anyio.fail_after(timeout + 10):
                result = await self._client.call_tool(name, args, read_timeout_seconds=timeout,
                                                      meta=self.meta(call_id))
        except Exception as exc:
            if isinstance(exc, TimeoutError) or getattr(exc, "code", None) == _request_timeout():
                log.warning("%s did not answer within %.0f s; rebuilding the connection", name, timeout)
                await self._break()
                raise CallTimeout(f"{name}: no answer within {timeout:g} s") from None
            if _is_tool_level(exc):
                return ToolAnswer(False, f"{name} failed: {exc}", None)
            await self._break()
            raise LinkDown(f"{name}: the connection broke: {exc!r}") from exc
        text = "\n".join(getattr(c, "text", "") for c in result.content if getattr(c, "text", None))
        structured = result.structured_content if isinstance(result.structured_content, dict) else None
        return ToolAnswer(not result.is_error, text, structured)

    async def read_resource(self, uri: str, *, timeout: float) -> ToolAnswer:
        await self.ensure()
        try:
            with anyio.fail_after(timeout):
                result = await self._client.read_resource(uri, meta=self.meta(None))
        except Exception as exc:
            if isinstance(exc, TimeoutError) or getattr(exc, "code", None) == _request_timeout():
                await self._break()
                raise CallTimeout(f"read_resource {uri}: no answer within {timeout:g} s") from None
            if _is_tool_level(exc):
                return ToolAnswer(False, f"cannot read {uri}: {exc}", None)
            await self._break()
            raise LinkDown(f"read_resource {uri}: the connection broke: {exc!r}") from exc
        text = "\n".join(getattr(c, "text", "") or "" for c in result.contents)
        return ToolAnswer(True, text, None)

    async def _break(self) -> None:
        self._broken = True
        await self.close()

    def is_safe_to_repeat(self, tool: str) -> bool:
        """Read-only or idempotent by the server's own annotations (or the client's resource reads)."""
        if tool == READ_RESOURCE.name:
            return True
        ann = self.annotations.get(tool) or {}
        return bool(ann.get("read_only_hint") or ann.get("idempotent_hint"))


def _request_timeout() -> int:
    from mcp_types import REQUEST_TIMEOUT

    return int(REQUEST_TIMEOUT)


def _is_tool_level(exc: BaseException) -> bool:
    """An error the server answered with (bad arguments, unknown resource, its own fault), as opposed to a
    connection that closed or timed out: after one of these the connection is still good."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    return isinstance(exc, MCPError) and exc.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT)
