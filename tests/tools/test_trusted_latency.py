"""tools.judge.trusted_latency_us: the judge's own figure for an empty batch's round trip, the cap on the latency
the bracket subtracts. A candidate's empty batch follows the judge's work on the batch before, and a process
woken from a wait answers slower (benchmarks/probe_batch_latency.py), so the trusted process is asked after a
pause too: asked back to back, its figure was the warm one and capped every honest profile below its own latency.
Driven here against a stand-in process on a socket pair, which records when each request arrives.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tools import judge, wire
from tools.sandbox import OutputTail, Spawned


class StandInSandbox:
    """spawn() hands out a socket whose far end answers every request at once, as a fast null process would."""

    def __init__(self, tmp: Path, host_s: float = 0.0, delay_s: float = 0.0) -> None:
        self.tmp, self.host_s, self.delay_s = tmp, host_s, delay_s
        self.arrivals: list[tuple[str, float]] = []
        self.reaped = 0

    def _serve(self, sock: socket.socket) -> None:
        while True:
            try:
                msg = wire.recv(sock, 30.0)
            except wire.WireError:
                return
            self.arrivals.append((str(msg.header.get("op")), time.perf_counter()))
            time.sleep(self.delay_s)
            wire.send(sock, {"ok": True, "host_s": self.host_s})

    def spawn(self, sha: str, source: str) -> Spawned:
        assert source == judge.NULL_SOURCE
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        threading.Thread(target=self._serve, args=(theirs,), daemon=True).start()
        read_end, write_end = os.pipe()
        os.close(write_end)
        return Spawned(pid=os.getpid(), sock=ours, workdir=self.tmp, output=OutputTail(read_end))

    def reap(self, spawned: Spawned) -> str:
        spawned.sock.close()
        self.reaped += 1
        return "exited with code 0"


class StandInWorker:
    def __init__(self, sandbox: StandInSandbox) -> None:
        self.sandbox = sandbox


def test_the_null_process_is_asked_after_a_pause_each_time(tmp_path: Path) -> None:
    sandbox = StandInSandbox(tmp_path)
    figure = judge.trusted_latency_us(StandInWorker(sandbox))
    ops = [op for op, _ in sandbox.arrivals]
    assert ops == ["load"] + ["batch"] * judge.NULL_BATCHES
    times = [t for _, t in sandbox.arrivals]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= judge.NULL_GAP_S
    # The pause is the judge's, before it starts the clock: the figure is the round trip alone.
    assert 0 < figure < judge.NULL_GAP_S * 1e6
    assert sandbox.reaped == 1


def test_the_figure_is_the_least_round_trip_after_the_first(tmp_path: Path) -> None:
    sandbox = StandInSandbox(tmp_path, delay_s=0.004)
    figure = judge.trusted_latency_us(StandInWorker(sandbox))
    assert 4_000 <= figure < 4_000 + 50_000


def test_a_null_process_that_fails_is_the_judges_fault_not_a_verdict(tmp_path: Path, monkeypatch: Any) -> None:
    sandbox = StandInSandbox(tmp_path)
    monkeypatch.setattr(sandbox, "_serve", lambda sock: (wire.recv(sock, 30.0), wire.send(sock, {"ok": False,
                                                                                                "error": "boom"})))
    with pytest.raises(RuntimeError, match="null process failed `load`"):
        judge.trusted_latency_us(StandInWorker(sandbox))
