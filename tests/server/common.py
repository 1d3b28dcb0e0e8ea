"""Shared pieces of the server tests (no tests here): candidates, environments, subprocess servers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STARTER = (ROOT / "kernels" / "softmax" / "starter.py").read_text()

# Returns the right shape and dtype, never the right numbers: a wrong result, not a crash.
WRONG = "import torch\n\n\ndef entry(x):\n    return torch.zeros_like(x)\n"
REFUSED = "import flash_attn\n\n\ndef entry(x):\n    return x\n"
SYNTAX = "def entry(x):\n    return (x\n"
HANGS = "import torch\n\n\ndef entry(x):\n    while True:\n        pass\n"

TOOLS = {"list_problems", "compile", "profile", "hotspots", "baseline", "attempts", "best", "attempt", "note"}


def server_env(home: Path, **extra: str) -> dict[str, str]:
    """What a `marathon serve` subprocess needs; stdio_client passes few variables on its own."""
    env = {"PYTHONPATH": str(ROOT), "MARATHON_HOME": str(home), "TRITON_INTERPRET": "1",
           "CUDA_VISIBLE_DEVICES": "", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": os.environ.get("HOME", "/tmp"), "TRITON_CACHE_DIR": str(home / "triton-cache")}
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def http_server(home: Path, port: int, **env: str) -> Iterator[subprocess.Popen[str]]:
    """`marathon serve --http` on a loopback port, stopped (with its process group) afterwards.

    Its stdout and stderr go to home/serve.stdout and home/serve.stderr."""
    full = {k: v for k, v in os.environ.items() if k != "MARATHON_TOKEN"}
    full.update(server_env(home, **env))
    out = open(home / "serve.stdout", "w")  # files, not pipes: a full pipe would stall the server
    err = open(home / "serve.stderr", "w")
    proc = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--http", "--port", str(port)],
                            cwd=ROOT, env=full, stdout=out, stderr=err, text=True, start_new_session=True)
    out.close()
    err.close()
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {(home / 'serve.stderr').read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start listening within 60 s")
            time.sleep(0.1)
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def intents(home_db: Path) -> list[dict[str, Any]]:
    """The tool.intent payloads in an event log, oldest first."""
    from state import EventLog

    with EventLog(home_db) as log:
        return [e.payload for e in log.events(kinds=["tool.intent"])]
