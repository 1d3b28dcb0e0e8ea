"""`marathon serve`: run the MCP server over stdio (default) or streamable HTTP.

mcp, torch and the rest load only when the command runs (server.app, server.service, server.transport).
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

import click

from cli.group import Command

DEFAULT_PORT = 8765


@click.command("serve", cls=Command)
@click.option("--http", is_flag=True,
              help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (needs a bearer token: "
                   "$MARATHON_TOKEN, else $MARATHON_HOME/token, generated on first start, mode 0600)")
@click.option("--host", default="127.0.0.1", help="address to listen on with --http (default loopback)")
@click.option("--port", type=int, default=DEFAULT_PORT, help=f"port with --http (default {DEFAULT_PORT})")
@click.option("--show-token", is_flag=True, help="with --http, also print the token to stderr")
@click.option("--print-token", is_flag=True,
              help="print the HTTP bearer token to stdout (creating it if needed) and exit")
@click.option("--heartbeat", type=float, metavar="S",
              help="longest silence between progress notifications of a long call (default 5 s)")
@click.option("--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
              help="log level for stderr and $MARATHON_HOME/logs/server.log (default INFO)")
def serve(http: bool, host: str, port: int, show_token: bool, print_token: bool, heartbeat: float | None,
          log_level: str) -> int:
    if print_token:
        from server.auth import load_token

        print(load_token().value)
        return 0
    if hasattr(signal, "SIGPIPE"):
        # The CLI dies quietly on a closed pipe (`| head`); a server must not: a write to a worker that just died,
        # or to a client that left, is an error to handle (the pool replaces the worker), not the end.
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if http:
        return _serve_http(host, port, show_token, heartbeat, log_level)
    from server.transport import claim_stdio

    proto = claim_stdio()  # first: from here on nothing but the protocol reaches the real stdout
    return _run("stdio", proto, host, port, heartbeat, log_level)


def _serve_http(host: str, port: int, show_token: bool, heartbeat: float | None, log_level: str) -> int:
    from server.auth import TokenError, load_token

    try:
        token = load_token()
    except (TokenError, OSError) as exc:
        print(f"marathon serve: {exc}", file=sys.stderr)
        return 2
    where = {"env": "from $MARATHON_TOKEN", "file": f"from {token.path}",
             "generated": f"generated and stored in {token.path} (mode 0600)"}[token.origin]
    print(f"marathon serve: bearer token {where}; clients send 'Authorization: Bearer <token>' "
          "(`marathon serve --print-token` prints it)", file=sys.stderr)
    if show_token:
        print(f"marathon serve: token: {token.value}", file=sys.stderr)
    return _run("http", token.value, host, port, heartbeat, log_level)


def _run(transport: str, extra: Any, host: str, port: int, heartbeat: float | None, log_level: str) -> int:
    import anyio

    from server import logging_setup
    from server.app import build_app
    from server.request_plumbing import new_process_session
    from server.service import Service

    path = logging_setup.configure(log_level)
    log = logging.getLogger("marathon.server")
    service = Service()
    try:
        if transport == "stdio":
            from server.transport import serve_stdio

            app = build_app(service, heartbeat_s=heartbeat, process_session=new_process_session("stdio"))
            log.info("serving MCP over stdio; log %s; event log %s", path, service.log.path)
            proto_in, proto_out = extra
            anyio.run(serve_stdio, app, proto_in, proto_out)
        else:
            from server.auth import auth_kwargs
            from server.transport import serve_http

            url = f"http://{_url_host(host)}:{port}"
            app = build_app(service, heartbeat_s=heartbeat, **auth_kwargs(str(extra), url))
            log.info("serving MCP at %s/mcp; log %s; event log %s", url, path, service.log.path)
            anyio.run(serve_http, app, host, port)
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
        log.info("server stopped")
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
