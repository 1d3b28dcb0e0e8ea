"""MCP server round trips: `list_problems` over stdio and a small `compile` over streamable HTTP.

    python benchmarks/bench_server.py [--calls 30] [--compiles 10] [--home PATH]

1. stdio: `marathon serve` as a subprocess through mcp.Client (legacy handshake, as today's
   clients use): time to connect (process start, imports, initialize), then `list_problems`
   round trips: the first call separately, then the median of --calls more.
2. HTTP: `marathon serve --http` on a free loopback port, a client with the bearer token: the
   first `compile` of the softmax starter (a real compile: launch capture under the interpreter,
   then ptxas for sm_90), then the median of --compiles more (answered from the compile cache, so
   this is the server's own overhead: HTTP, auth, logging intent, attempt and result).

State goes to a temporary MARATHON_HOME (or --home), deleted afterwards unless given. Prints a
Markdown table; the numbers are this machine's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = Path(__file__).resolve().parent.parent
STARTER = (ROOT / "kernels" / "softmax" / "starter.py").read_text()


def _env(home: Path) -> dict[str, str]:
    env = {"PYTHONPATH": str(ROOT), "MARATHON_HOME": str(home), "PATH": os.environ.get("PATH", "")}
    for key in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES", "TRITON_CACHE_DIR", "HOME"):
        if key in os.environ:
            env[key] = os.environ[key]
    if "CUDA_VISIBLE_DEVICES" not in env and not shutil.which("nvidia-smi"):
        env["TRITON_INTERPRET"] = "1"
    return env


async def _timed(calls: int, fn: Any) -> tuple[float, list[float]]:
    times = []
    for _ in range(calls + 1):
        t = time.perf_counter()
        result = await fn()
        times.append(time.perf_counter() - t)
        assert not result.is_error, result.content
    return times[0], times[1:]


async def bench_stdio(home: Path, calls: int) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable, env=_env(home), cwd=str(ROOT),
                                   args=["-m", "cli", "serve", "--log-level", "WARNING"])
    t = time.perf_counter()
    async with Client(params, mode="legacy") as c:
        connect = time.perf_counter() - t
        first, rest = await _timed(calls, lambda: c.call_tool("list_problems", {}))
    return {"connect_s": connect, "first_s": first, "median_s": statistics.median(rest), "n": len(rest)}


async def bench_http(home: Path, compiles: int) -> dict[str, Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **_env(home)}
    env.pop("MARATHON_TOKEN", None)
    log = open(home / "serve-http.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--http", "--port", str(port),
                             "--log-level", "WARNING"], cwd=ROOT, env=env, stdout=log, stderr=log,
                            start_new_session=True)
    log.close()
    try:
        t = time.perf_counter()
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.perf_counter() - t > 60:
                    raise RuntimeError((home / "serve-http.log").read_text()[-2000:]) from None
                await anyio.sleep(0.05)
        listening = time.perf_counter() - t
        token = (home / "token").read_text().strip()
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http), mode="legacy") as c:
            first, rest = await _timed(compiles, lambda: c.call_tool("compile", {"problem": "softmax",
                                                                                 "source": STARTER}))
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
    return {"listening_s": listening, "first_s": first, "median_s": statistics.median(rest), "n": len(rest)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=30, help="list_problems calls after the first (stdio)")
    ap.add_argument("--compiles", type=int, default=10, help="compile calls after the first (HTTP)")
    ap.add_argument("--home", type=Path, help="MARATHON_HOME to use (default: a temporary one, deleted)")
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="marathon-bench-server-"))
    home.mkdir(parents=True, exist_ok=True)
    try:
        stdio = anyio.run(bench_stdio, home / "stdio", args.calls)
        (home / "http").mkdir(exist_ok=True)
        http = anyio.run(bench_http, home / "http", args.compiles)
    finally:
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    print("| transport | call | connect / listen | first call | median of the rest |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| stdio | list_problems | {stdio['connect_s'] * 1e3:.0f} ms (start + initialize) | "
          f"{stdio['first_s'] * 1e3:.1f} ms | {stdio['median_s'] * 1e3:.2f} ms (n={stdio['n']}) |")
    print(f"| HTTP | compile (softmax starter) | {http['listening_s'] * 1e3:.0f} ms (to listening) | "
          f"{http['first_s'] * 1e3:.0f} ms (real compile) | {http['median_s'] * 1e3:.2f} ms cached (n={http['n']}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
