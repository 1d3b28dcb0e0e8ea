"""Run a command whose processes run candidate code, and leave none of them behind: `python -m tools.reaped`.

The compile steps and the ncu runs start processes that import the candidate, and a candidate can start its own
(fork, setsid, fork again): a process that outlives its step keeps its sandbox but can load the CPU or the GPU while
trusted code measures, or rewrite the files the next step reads. This shim is the subreaper of everything the
command starts: when the command ends (or its time is up) every process below the shim is killed and collected,
then the shim exits with the command's status (124 when its time ran out).

Usage: python -P -m tools.reaped TIMEOUT_S -- CMD [ARG ...]. `trusted_python` builds the interpreter's part of
such command lines so that a module planted in the working folder is never imported (see its docstring).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

TIMED_OUT = 124
SWEEP_S = 20.0
REAP_GRACE_S = SWEEP_S + 10.0  # a caller's backstop beyond the command's own limit


def trusted_python(module: str, *args: str) -> list[str]:
    """`python -m module args` that imports nothing from its working folder: `-m` puts that folder first on
    sys.path, and a step that starts where candidate code wrote could import a planted `tools/` or `json.py`
    before it confines itself. `-P` (Python 3.11+) leaves it out; callers also start it in a folder of their own."""
    safe = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe, "-m", module, *args]


def reaped(timeout_s: float, cmd: list[str]) -> list[str]:
    """`cmd` under this shim, its processes reaped when it ends or after `timeout_s`."""
    return trusted_python("tools.reaped", f"{timeout_s:.3f}", "--", *cmd)


def run_reaped(cmd: list[str], timeout_s: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """subprocess.run of `cmd` under the shim, text output captured: TimeoutExpired when its time ran out (the
    shim's limit, or this call's backstop beyond it)."""
    proc = subprocess.run(reaped(timeout_s, cmd), capture_output=True, text=True, timeout=timeout_s + REAP_GRACE_S,
                          **kwargs)
    if proc.returncode == TIMED_OUT:
        raise subprocess.TimeoutExpired(cmd, timeout_s)
    return proc


def main(argv: list[str]) -> int:
    from tools.sandbox import _PR_SET_CHILD_SUBREAPER, _kill_descendants, _prctl

    timeout_s = float(argv[0])
    if argv[1] != "--":
        raise SystemExit("usage: python -m tools.reaped TIMEOUT_S -- CMD [ARG ...]")
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    proc = subprocess.Popen(argv[2:])
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = TIMED_OUT
    deadline = time.monotonic() + SWEEP_S
    while time.monotonic() < deadline:
        killed = _kill_descendants()
        while True:  # orphans reparented here: collect them, so that none is left even as a zombie
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
        if not killed:
            break
        time.sleep(0.002)
    return rc if rc >= 0 else 128 - rc  # killed by a signal: the shell's convention


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
