"""The two ways to serve: stdio (one client, the default) and streamable HTTP at /mcp.

stdio: stdout is the protocol, so `claim_stdio()` runs before anything else is imported. It keeps
private duplicates of fds 0 and 1 for the protocol and points fd 1 at stderr and fd 0 at
/dev/null for the rest of the process's life: a print, a C library's message or a child process
(the compile steps inherit the descriptors) can never write into the protocol stream or read from
it. The SDK's own stdio transport does the same while it serves; this covers start-up and shutdown
as well.

HTTP: uvicorn serving the SDK's streamable HTTP app, loopback by default (with the SDK's
DNS-rebinding protection), bearer token required (server.auth), request bodies up to
server.body_limit.HTTP_MAX_BODY_BYTES (7 MiB), a larger one answered as a JSON-RPC error.
"""

from __future__ import annotations

import io
import logging
import os
import sys
from typing import IO, Any

log = logging.getLogger("marathon.server")


def claim_stdio() -> tuple[IO[bytes], IO[bytes]]:
    """Take fds 0 and 1 for the protocol; returns (protocol_in, protocol_out) binary streams."""
    sys.stdout.flush()
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)  # os.dup: above fd 2, not inherited by children
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return proto_in, proto_out


async def serve_stdio(app: Any, proto_in: IO[bytes], proto_out: IO[bytes]) -> None:
    """Serve `app` (an MCPServer) over the claimed protocol streams until the client hangs up."""
    import anyio
    from mcp.server.stdio import stdio_server

    reader = anyio.wrap_file(io.TextIOWrapper(proto_in, encoding="utf-8", errors="replace"))
    writer = anyio.wrap_file(io.TextIOWrapper(proto_out, encoding="utf-8", write_through=True))
    # MCPServer.run_stdio_async, with explicit streams (it would claim fd 1, which is stderr by now).
    lowlevel = app._lowlevel_server
    async with stdio_server(stdin=reader, stdout=writer) as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


async def serve_http(app: Any, host: str, port: int) -> None:
    """Serve `app` over streamable HTTP at http://host:port/mcp until interrupted."""
    import uvicorn

    from server.body_limit import HTTP_MAX_BODY_BYTES, BodyLimit

    # BodyLimit answers an oversized body first (as JSON-RPC); the SDK's own check, at the same size, never fires.
    starlette_app = app.streamable_http_app(host=host, max_request_body_size=HTTP_MAX_BODY_BYTES)
    config = uvicorn.Config(BodyLimit(starlette_app, HTTP_MAX_BODY_BYTES), host=host, port=port, log_config=None,
                            access_log=False, timeout_graceful_shutdown=5)
    await uvicorn.Server(config).serve()
