"""Client loop benchmark: the loop's own cost per step, and its memory over a long scripted run.

    python benchmarks/bench_client.py [--steps 1000] [--server stub|inproc|both] [--dir PATH]

A scripted policy (no model) drives --steps tool calls: list_problems, notes, attempts, best, resource
reads, in a cycle, with a turn of two calls now and then; the conversation grows and is compacted on the
default threshold scaled down (so a 1,000-step run compacts several times, as a day-long run would).

- stub: the tools answer at once from canned texts of realistic size, without MCP: everything left is
  the loop (log commits with synchronous=FULL, the RunState fold, the pinned block, the transcript,
  compaction).
- inproc: the real MCP server in this process, over an in-memory MCP client; the tool time (client and
  server) is measured around each call and subtracted.

Loop overhead per step = (wall - policy time - tool time) / steps. Memory: the process's resident size
(VmRSS) and Python's traced heap (tracemalloc, with --trace) at steps 100, 250, 500 and the end. Prints
a Markdown table.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, ClassVar

os.environ.setdefault("TRITON_INTERPRET", "1")

import anyio

from client.compaction import CompactionConfig
from client.goal import Budget, Goal
from client.loop import Loop, LoopOptions, start_run
from client.mcp_link import Link, ServerSpec, ToolAnswer
from client.policy import ToolCall, ToolSpec, Turn, TurnContext, Usage
from state import EventLog

SAMPLES = (100, 250, 500)


def rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Cycle:
    """The scripted policy: a deterministic turn from the step count; samples memory as it goes."""

    name = "scripted"

    def __init__(self, trace: bool) -> None:
        self.trace = trace
        self.samples: dict[int, tuple[float, float]] = {}
        self.loop: Loop | None = None
        self.clock: dict[int, tuple[float, dict[str, float]]] = {}  # step -> (time, the loop's timings then)

    def next_turn(self, ctx: TurnContext) -> Turn:
        step = int(ctx.pinned["step"]) + 1
        for mark in SAMPLES:
            if step >= mark and mark not in self.samples:
                heap = tracemalloc.get_traced_memory()[0] / 2**20 if self.trace else float("nan")
                self.samples[mark] = (rss_mb(), heap)
                if self.loop is not None:
                    self.clock[mark] = (time.perf_counter(), dict(self.loop.timings))
        kind = step % 5
        if kind == 0:
            calls = (ToolCall(f"n{step}", "note", {"text": f"step {step}: tried idea {step % 17}, it did "
                                                   "not help: " + "details " * 20, "problem": "softmax"}),
                     ToolCall(f"a{step}", "attempts", {"problem": "softmax", "limit": 5}))
        elif kind == 1:
            calls = (ToolCall(f"l{step}", "list_problems", {}),)
        elif kind == 2:
            calls = (ToolCall(f"b{step}", "best", {"problem": "softmax"}),)
        elif kind == 3:
            calls = (ToolCall(f"r{step}", "read_resource", {"uri": "problem://softmax/description"}),)
        else:
            calls = (ToolCall(f"n{step}", "note", {"text": f"hypothesis {step}", "problem": "softmax",
                                                   "tags": ["hypothesis"]}),)
        return Turn(f"turn {step}: next idea", calls, usage=Usage(0, 40, 0.0), model="cycle")


class StubLink(Link):
    """A Link whose tools answer at once, from texts of the size the real ones return."""

    TEXTS: ClassVar[dict[str, str]] = {
        "list_problems": "problem x: summary\n" * 60, "attempts": "attempt 1: correct 41 us 1.5x\n" * 6,
        "best": "no correct attempt for softmax/bench yet", "note": "noted (#1)",
        "read_resource": "# softmax (warm-up)\n" + "the contract, line by line\n" * 80}

    def __init__(self) -> None:
        super().__init__(ServerSpec(app=object()))
        self.tools = [ToolSpec(name, f"the {name} tool", {"type": "object", "properties": {}})
                      for name in ("list_problems", "attempts", "best", "note", "compile", "profile", "baseline",
                                   "attempt")]
        self.annotations = {t.name: {"read_only_hint": t.name != "note"} for t in self.tools}
        self._notes = 0

    async def ensure(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def call(self, name: str, args: dict[str, Any], *, call_id: str | None, timeout: float) -> ToolAnswer:
        structured = None
        if name == "note":
            self._notes += 1
            structured = {"id": 10_000_000 + self._notes, "ts": time.time()}
        return ToolAnswer(True, self.TEXTS.get(name, "ok"), structured)

    async def read_resource(self, uri: str, *, timeout: float) -> ToolAnswer:
        return ToolAnswer(True, self.TEXTS["read_resource"])


async def _drive(log: EventLog, link: Link, policy: Cycle, run_id: str, options: LoopOptions) -> Loop:
    await link.ensure()
    loop = Loop(log, link, policy, run_id, options=options)
    policy.loop = loop
    await loop.run()
    return loop


def run_once(mode: str, steps: int, folder: Path, trace: bool) -> dict[str, Any]:
    home = folder / mode
    home.mkdir(parents=True)
    log = EventLog(home / "marathon.db")
    run_id = f"bench-{mode}"
    options = LoopOptions(compaction=CompactionConfig(threshold=20_000))
    start_run(log, run_id, Goal(problem="softmax", budget=Budget(steps=steps)), policy="scripted",
              options=options)
    service = None
    if mode == "inproc":
        from server.app import build_app
        from server.service import Service

        service = Service(log=EventLog(home / "marathon.db"), cache_dir=home / "cache")
        link: Link = Link(ServerSpec(app=build_app(service)), run_id=run_id)
    else:
        link = StubLink()
    policy = Cycle(trace)
    if trace:
        tracemalloc.start()
    rss0 = rss_mb()
    started = time.perf_counter()
    try:
        loop = anyio.run(functools.partial(_drive, log, link, policy, run_id, options))
    finally:
        if service is not None:
            service.close()
    ended = time.perf_counter()
    wall = ended - started
    heap_end = tracemalloc.get_traced_memory()[0] / 2**20 if trace else float("nan")
    if trace:
        tracemalloc.stop()
    rss_end = rss_mb()
    t = loop.timings
    compactions = len(log.events(run_id=run_id, kinds=["compaction"]))
    events = len(log.events(run_id=run_id))
    log.close()
    overhead = (wall - t["policy_s"] - t["tools_s"]) / max(1, t["steps"])
    windows = []  # overhead per step from one sample to the next: flat if the loop's cost does not grow
    marks = [(m, *policy.clock[m]) for m in SAMPLES if m in policy.clock] + [(t["steps"], ended, dict(t))]
    for (_, t0, a), (_, t1, b) in itertools.pairwise(marks):
        n = b["steps"] - a["steps"]
        spent = (t1 - t0) - (b["policy_s"] - a["policy_s"]) - (b["tools_s"] - a["tools_s"])
        windows.append(spent / max(1, n) * 1000)
    return {"mode": mode, "steps": t["steps"], "wall_s": wall, "tools_s": t["tools_s"], "policy_s": t["policy_s"],
            "overhead_ms": overhead * 1000, "compactions": compactions, "events": events, "rss0": rss0,
            "samples": policy.samples, "rss_end": rss_end, "heap_end": heap_end, "windows": windows,
            "visible_messages": len(loop.transcript.messages())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--server", choices=["stub", "inproc", "both"], default="both")
    parser.add_argument("--trace", action="store_true", help="also trace the Python heap (slower)")
    parser.add_argument("--dir", help="where the temporary event logs go (default: the system's temp dir)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_client_", dir=args.dir))
    modes = ["stub", "inproc"] if args.server == "both" else [args.server]
    try:
        rows = [run_once(mode, args.steps, folder, args.trace) for mode in modes]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"| tools | steps | wall s | tool time s | loop overhead per step | the same over steps "
          f"{'-'.join(map(str, SAMPLES))}-end | events | compactions | RSS MB at {', '.join(map(str, SAMPLES))}, end "
          "| traced heap MB at the same |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |")
    for r in rows:
        rss = ", ".join(f"{r['samples'][m][0]:.0f}" for m in SAMPLES if m in r["samples"]) + f", {r['rss_end']:.0f}"
        heap = ", ".join(f"{r['samples'][m][1]:.1f}" for m in SAMPLES if m in r["samples"]) + f", {r['heap_end']:.1f}"
        windows = ", ".join(f"{w:.2f}" for w in r["windows"]) + " ms"
        print(f"| {r['mode']} | {r['steps']} | {r['wall_s']:.2f} | {r['tools_s']:.2f} | {r['overhead_ms']:.2f} ms | "
              f"{windows} | {r['events']} | {r['compactions']} | {rss} | {heap} |")
    growth = [r["rss_end"] - r["samples"][100][0] for r in rows if 100 in r["samples"]]
    if growth:
        print(f"\nRSS growth from step 100 to the end: {', '.join(f'{g:+.1f} MB' for g in growth)} "
              f"(median {statistics.median(growth):+.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
