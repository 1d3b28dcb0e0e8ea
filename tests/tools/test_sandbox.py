"""What a process that runs candidate code can no longer do once confined (tools.sandbox.confine)."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from tools import landlock
from tools.sandbox import Sandbox, confine

needs_landlock = pytest.mark.skipif(landlock.abi_version() < 1, reason="this kernel has no Landlock")


def in_confined_child(writable: Path, probe) -> dict:
    """Fork, confine the child to `writable`, run `probe()` there and return what it reports."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            confine(writable, cuda=False)
            out = probe()
        except BaseException as exc:
            out = {"error": repr(exc)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def attempt(fn) -> str:
    try:
        fn()
        return "allowed"
    except OSError as exc:
        return f"refused ({exc.errno})"


@needs_landlock
def test_writes_outside_its_folder_are_refused(tmp_path: Path) -> None:
    own, state = tmp_path / "own", tmp_path / "state"
    own.mkdir()
    state.mkdir()
    (state / "marathon.db").write_bytes(b"log")

    def probe() -> dict:
        return {
            "own": attempt(lambda: (own / "x").write_text("ok")),
            "state_new": attempt(lambda: (state / "token").write_text("x")),
            "state_append": attempt(lambda: open(state / "marathon.db", "ab").write(b"x")),
            "state_unlink": attempt(lambda: (state / "marathon.db").unlink()),
            "project": attempt(lambda: open(Path(__file__), "a").write("# patched\n")),
            "read": attempt(lambda: (state / "marathon.db").read_bytes()),
        }

    got = in_confined_child(own, probe)
    assert got["own"] == "allowed" and got["read"] == "allowed", got
    for key in ("state_new", "state_append", "state_unlink", "project"):
        assert got[key].startswith("refused"), (key, got)
    assert (state / "marathon.db").read_bytes() == b"log" and not (state / "token").exists()


@needs_landlock
def test_no_tcp_and_no_signal_to_the_judge(tmp_path: Path) -> None:
    if landlock.abi_version() < 6:
        pytest.skip("Landlock before ABI 6 scopes neither TCP (ABI 4) nor signals (ABI 6)")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    parent = os.getpid()
    old = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        got = in_confined_child(tmp_path, lambda: {
            "tcp": attempt(lambda: socket.create_connection(("127.0.0.1", port), timeout=2)),
            "signal": attempt(lambda: os.kill(parent, signal.SIGUSR1)),
        })
    finally:
        signal.signal(signal.SIGUSR1, old)
        server.close()
    assert got["tcp"].startswith("refused") and got["signal"].startswith("refused"), got


DAEMON = """
import os

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open("daemon.pid", "w") as f:
            f.write(str(os.getpid()))
        while True:
            pass
    os._exit(0)


def entry():
    pass
"""


def test_a_candidate_process_is_reaped_with_everything_it_started(tmp_path: Path) -> None:
    """A child that detached (its own session, a double fork) still dies with the candidate's process."""
    from tools import wire

    sandbox = Sandbox(tmp_path / "sandbox")
    daemon = None
    try:
        spawned = sandbox.spawn("ab" * 32, DAEMON)
        wire.send(spawned.sock, {"op": "load"})
        assert wire.recv(spawned.sock, timeout=60).header.get("ok")
        pid_file = spawned.workdir / "daemon.pid"
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        daemon = int(pid_file.read_text())
        os.kill(daemon, 0)  # running, in a session of its own
        status = sandbox.reap(spawned)  # closing its socket may end it first: either way it is gone
        assert "SIGKILL" in status or "exited with code 0" in status, status
        for pid in (spawned.pid, daemon):
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        sandbox.close()
        if daemon is not None:  # a failed run must not leave a spinner behind
            try:
                os.kill(daemon, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_live_processs_output_is_read_without_waiting_for_its_pipe_to_close() -> None:
    """A process kept for a repeat profile is alive when its output is read: what it wrote is there, and the read
    does not wait out the pipe's close (it cost every repeat profile 0.5 s)."""
    from types import SimpleNamespace

    from tools.judge import OUTPUT_WAIT_S, Session
    from tools.sandbox import OutputTail

    read_end, write_end = os.pipe()
    tail = OutputTail(read_end)
    try:
        os.write(write_end, b"compiled 3 kernels\n" * 100)
        t0 = time.monotonic()
        out = tail.snapshot(wait_s=0.0)
        assert time.monotonic() - t0 < OUTPUT_WAIT_S / 2
        assert out["output_bytes"] == 1900 and out["output_tail"].endswith("compiled 3 kernels\n")
    finally:
        os.close(write_end)

    waits: list[float] = []
    recorder = SimpleNamespace(snapshot=lambda limit, wait_s: waits.append(wait_s) or {})
    session = Session(sandbox=None, spawned=SimpleNamespace(output=recorder), deadline=0.0)  # type: ignore[arg-type]
    session.output()
    session.exit_status = "exited with code 0"
    session.output()
    assert waits == [0.0, OUTPUT_WAIT_S], "only an ended process's pipe is waited for"


def test_the_reaping_shim_stops_its_command_at_its_limit_and_leaves_nothing() -> None:
    """tools.reaped: the command's status, 124 when its time ran out, and no process it started left running."""
    import subprocess
    import sys
    import time

    from tools.reaped import TIMED_OUT, reaped

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    tag = f"reaped-probe-{time.monotonic_ns()}"
    leave = f"import os\nif os.fork() == 0:\n    os.setsid()\n    os.execvp('sleep', [{tag!r}, '60'])\n"
    t0 = time.monotonic()
    done = subprocess.run(reaped(30.0, [sys.executable, "-c", leave]), env=env, timeout=60)
    assert done.returncode == 0 and time.monotonic() - t0 < 20
    slow = subprocess.run(reaped(0.5, ["sleep", "30"]), env=env, timeout=60)
    assert slow.returncode == TIMED_OUT
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, tag)]
    assert left == []


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False
