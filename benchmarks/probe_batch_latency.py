"""An empty batch's round trip to a process spawned as the judge spawns candidates, asked back to back and after
the judge has been busy or asleep for a while: whether honest candidates' empty batches (644-882 us on the H200)
outlast the judge's null process's (101-233 us, asked back to back) because a process that waits through the
judge's work between batches wakes up cold (BENCHMARKS.md, "Fifth session on the judged path").

For each process (the judge's null candidate, the softmax starter) and each gap, it prints the median and least
wall time of an empty batch and the process's own share of it (`host_s`, what the bracket reports as
`batch_latency_host_us`). A wall that grows with the gap, at the null process as much as at the starter, means
the trusted figure is measured warm and the candidates' cold, and the trusted process should be asked after a gap.

Usage (from the project root, after the device preamble; on a CPU under TRITON_INTERPRET=1):
    python benchmarks/probe_batch_latency.py [--gaps-ms 0,1,5,20] [--n 15]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tools.sandbox import Sandbox
from tools.worker import _preload_for_candidates


def wait(gap_s: float, busy: bool) -> None:
    """The judge's time between two batches: asleep (waiting on I/O), or computing on this core."""
    if not busy:
        time.sleep(gap_s)
        return
    end = time.perf_counter() + gap_s
    while time.perf_counter() < end:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gaps-ms", default="0,1,5,20", help="the judge's pause before each empty batch")
    ap.add_argument("--n", type=int, default=15, help="empty batches per gap (after one that is not counted)")
    args = ap.parse_args()
    gaps = [float(g) / 1e3 for g in args.gaps_ms.split(",") if g]

    _preload_for_candidates()
    sandbox = Sandbox(Path(tempfile.mkdtemp(prefix="probe-latency-")))  # forks the zygote: before CUDA

    from kernels import starter_path
    from tools.candidate import source_sha
    from tools.judge import CALL_TIMEOUT_S, NULL_SOURCE, Session

    sources = {"null": NULL_SOURCE, "softmax starter": starter_path("softmax").read_text()}
    try:
        for name, source in sources.items():
            session = Session(sandbox, sandbox.spawn(source_sha(source), source), time.monotonic() + 3600)
            try:
                if not session.request({"op": "load"}, timeout=CALL_TIMEOUT_S).header.get("ok"):
                    raise RuntimeError(f"{name}: its process failed to load")
                for busy in (False, True):
                    for gap in gaps:
                        walls, hosts = [], []
                        for i in range(args.n + 1):
                            wait(gap, busy)
                            t0 = time.perf_counter()
                            answer = session.request({"op": "batch", "seeds": []}, timeout=CALL_TIMEOUT_S)
                            wall = (time.perf_counter() - t0) * 1e6
                            if i:  # the first after a change of gap is not counted
                                walls.append(wall)
                                hosts.append(float(answer.header.get("host_s") or 0.0) * 1e6)
                        print(f"{name:16s} gap {gap * 1e3:5.1f} ms {'busy' if busy else 'asleep':6s}: wall median "
                              f"{statistics.median(walls):7.1f} us, least {min(walls):7.1f} us; its own share "
                              f"median {statistics.median(hosts):7.1f} us", flush=True)
            finally:
                session.close()
    finally:
        sandbox.close()


if __name__ == "__main__":
    main()
