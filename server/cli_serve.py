"""`marathon serve`: run the MCP server over stdio (default) or streamable HTTP.

Registered with client.cli on import; mcp, torch and the rest load only when the command runs.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from client import cli

DEFAULT_PORT = 8765


_register = cli.command


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--http", action="store_true",
                   help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (needs a bearer token: "
                        "$MARATHON_TOKEN, else $MARATHON_HOME/token, generated on first start, mode 0600)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on with --http (default loopback)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port with --http (default {DEFAULT_PORT})")
    p.add_argument("--show-token", action="store_true", help="with --http, also print the token to stderr")
    p.add_argument("--print-token", action="store_true",
                   help="print the HTTP bearer token to stdout (creating it if needed) and exit")
    p.add_argument("--heartbeat", type=float, metavar="S",
                   help="longest silence between progress notifications of a long call (default 5 s)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="log level for stderr and $MARATHON_HOME/logs/server.log (default INFO)")


@_register("serve", "run the MCP server: stdio (default) or streamable HTTP with a bearer token")(_serve_args)
def cmd_serve(args: argparse.Namespace) -> int:
    if args.print_token:
        from server.auth import load_token

        print(load_token().value)
        return 0
    if hasattr(signal, "SIGPIPE"):
        # The CLI dies quietly on a closed pipe (`| head`); a server must not: a write to a worker that just died,
        # or to a client that left, is an error to handle (the pool replaces the worker), not the end.
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if args.http:
        return _serve_http(args)
    from server.transport import claim_stdio

    proto = claim_stdio()  # first: from here on nothing but the protocol reaches the real stdout
    return _run(args, "stdio", proto)


def _serve_http(args: argparse.Namespace) -> int:
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
    if args.show_token:
        print(f"marathon serve: token: {token.value}", file=sys.stderr)
    return _run(args, "http", token.value)


def _run(args: argparse.Namespace, transport: str, extra: Any) -> int:
    import anyio

    from server import logging_setup
    from server.app import build_app
    from server.calls import new_process_session
    from server.service import Service

    path = logging_setup.configure(args.log_level)
    import logging

    log = logging.getLogger("marathon.server")
    service = Service()
    try:
        if transport == "stdio":
            from server.transport import serve_stdio

            app = build_app(service, heartbeat_s=args.heartbeat, process_session=new_process_session("stdio"))
            log.info("serving MCP over stdio; log %s; event log %s", path, service.log.path)
            proto_in, proto_out = extra
            anyio.run(serve_stdio, app, proto_in, proto_out)
        else:
            from server.auth import auth_kwargs
            from server.transport import serve_http

            url = f"http://{_url_host(args.host)}:{args.port}"
            app = build_app(service, heartbeat_s=args.heartbeat, **auth_kwargs(str(extra), url))
            log.info("serving MCP at %s/mcp; log %s; event log %s", url, path, service.log.path)
            anyio.run(serve_http, app, args.host, args.port)
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
        log.info("server stopped")
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
