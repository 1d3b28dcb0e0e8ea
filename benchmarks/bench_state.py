"""Event-log benchmark: append rate per durability setting, and the cost of the views on a big log.

    python benchmarks/bench_state.py [--events 100000] [--appends 2000] [--dir PATH]

1. Appends per second, one transaction per event (what the server does for every tool call), with
   synchronous=FULL (the default: each commit fsyncs the WAL) and NORMAL (for comparison only).
2. A log of --events events in a long run's mix (tool intent and result, attempt, model turn per
   iteration; notes and budget now and then; 3 problems x 2 shapes), then: opening it, recreating
   the views and their expression indexes, and the queries the agent's pinned block is built from.

The database goes in a temporary directory under --dir (default: the system's), so the numbers are
those of that disk; it is deleted afterwards. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from state import EventLog, intent_key

PROBLEMS = ("softmax", "mla_decode", "kda")
SHAPES = ("bench", "small")
OUTCOMES = ["correct"] * 8 + ["incorrect"] * 4 + ["compile_error"] * 4
OUTCOMES += ["rejected", "timeout", "crashed", "error"]
ERRORS = {
    "incorrect": "mismatch",
    "compile_error": "CompilationError",
    "rejected": "forbidden_import",
    "timeout": "timeout",
    "crashed": "illegal_memory_access",
    "error": "OutOfResources",
}


def attempt(rng: random.Random, sha: str) -> dict[str, Any]:
    outcome = rng.choice(OUTCOMES)
    timed = outcome in ("correct", "incorrect")
    median = rng.uniform(20, 200) if timed else None
    return {
        "problem": rng.choice(PROBLEMS),
        "shape": rng.choice(SHAPES),
        "source_sha": sha,
        "tool": "profile",
        "outcome": outcome,
        "error_class": ERRORS.get(outcome),
        "error": None if outcome == "correct" else "x" * rng.randint(50, 400),
        "max_rel_err": rng.uniform(0, 1e-2) if timed else None,
        "median_us": median,
        "spread_pct": rng.uniform(0, 5) if timed else None,
        "speedup": 30.0 / median if median else None,
        "device": "NVIDIA H200",
        "baseline_us": 30.0,
        "telemetry": {"sm_clock_mhz": 1980, "temp_c": rng.randint(40, 70), "power_w": rng.randint(200, 600)},
    }


def iteration(rng: random.Random, i: int, sha: str, run_id: str) -> list[tuple[Any, ...]]:
    """One agent-loop iteration's events (4, sometimes 5 or 6)."""
    args = {"problem": "mla_decode", "shape": "bench", "source_sha": sha, "i": i}
    key = intent_key("profile", args)
    out: list[tuple[Any, ...]] = [
        ("model.turn", {"provider": "p", "model": "m", "tokens_in": 40000, "tokens_out": 1500,
                        "latency_s": rng.uniform(5, 60)}, run_id),
        ("tool.intent", {"tool": "profile", "args_digest": key, "args": args, "client": "bench"},
         run_id, key),
        ("tool.result", {"tool": "profile", "intent_id": 0, "ok": True, "result": {"summary": "y" * 200}},
         run_id),
        ("attempt", attempt(rng, sha), run_id),
    ]
    if i % 10 == 0:
        out.append(("note", {"text": "z" * 120, "problem": rng.choice(PROBLEMS), "tags": ["idea"]}, run_id))
    if i % 25 == 0:
        out.append(("budget", {"tokens_in": i * 40000, "tool_calls": i, "wall_s": i * 60.0}, run_id))
    return out


def bench_appends(directory: Path, sync: str, n: int) -> dict[str, float]:
    rng = random.Random(0)
    path = directory / f"append_{sync}.db"
    with EventLog(path, synchronous=sync) as log:
        sha = log.put_source("def entry(x):\n    return x\n")
        payloads = [attempt(rng, sha) for _ in range(n)]
        lat = []
        start = time.perf_counter()
        for p in payloads:
            t = time.perf_counter()
            log.append("attempt", p, run_id="bench")
            lat.append(time.perf_counter() - t)
        total = time.perf_counter() - start
    lat.sort()
    p99 = lat[int(0.99 * (n - 1))]
    return {"rate": n / total, "mean_ms": statistics.fmean(lat) * 1e3, "p99_ms": p99 * 1e3}


def build_log(path: Path, events: int) -> int:
    rng = random.Random(1)
    n = 0
    with EventLog(path, synchronous="NORMAL") as log:  # building only; the timings below use FULL
        shas = [log.put_source(f"# kernel {k}\n" + "pass\n" * 400) for k in range(500)]
        batch: list[tuple[Any, ...]] = []
        i = 0
        while n < events:
            items = iteration(rng, i, rng.choice(shas), f"run{i // 5000}")
            items = items[: events - n]
            batch += items
            n += len(items)
            i += 1
            if len(batch) >= 1000:
                log.append_many(batch)
                batch = []
        if batch:
            log.append_many(batch)
    return n


def timed(fn: Callable[[], Any], repeat: int = 5) -> tuple[float, Any]:
    """Median wall time in ms over `repeat` calls, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000, help="size of the log for the view timings")
    ap.add_argument("--appends", type=int, default=2000, help="appends per durability setting")
    ap.add_argument("--dir", type=Path, default=None, help="where to put the temporary databases")
    args = ap.parse_args(argv)

    directory = Path(tempfile.mkdtemp(prefix="bench_state_", dir=args.dir))
    try:
        rows: list[tuple[str, str]] = []
        for sync in ("FULL", "NORMAL"):
            r = bench_appends(directory, sync, args.appends)
            rows.append((
                f"append, 1 event/transaction, synchronous={sync}",
                f"{r['rate']:,.0f} events/s (mean {r['mean_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms)",
            ))

        path = directory / "big.db"
        t = time.perf_counter()
        n = build_log(path, args.events)
        build_s = time.perf_counter() - t
        size_mb = sum(p.stat().st_size for p in directory.glob("big.db*")) / 1e6
        rows.append((f"build {n:,} events, append_many of 1000", f"{build_s:.1f} s, {size_mb:.0f} MB"))

        open_ms, log = timed(lambda: EventLog(path), repeat=1)
        rows.append(("open (connect, pragmas, schema and view check)", f"{open_ms:.1f} ms"))
        with log:
            attempts_total = log._c().execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
            ms, _ = timed(log.rebuild_views, repeat=3)
            rows.append((f"rebuild views + expression indexes ({attempts_total:,} attempts)", f"{ms:.0f} ms"))
            ms, res = timed(lambda: log.attempts(problem="mla_decode", shape="bench"))
            rows.append(("attempts(problem, shape), newest 50", f"{ms:.2f} ms"))
            ms, res = timed(lambda: log.attempts(problem="mla_decode", shape="bench", offset=1000))
            rows.append(("attempts(problem, shape), 50 at offset 1000", f"{ms:.2f} ms"))
            ms, res = timed(lambda: log.attempts(outcome="timeout", run_id="run0"))
            rows.append(("attempts(outcome, run_id), newest 50", f"{ms:.2f} ms"))
            ms, res = timed(lambda: log.attempts(limit=None), repeat=3)
            rows.append((f"attempts(), all {len(res):,}", f"{ms:.0f} ms"))
            ms, res = timed(lambda: [log.best(p, s) for p in PROBLEMS for s in SHAPES])
            rows.append(("best(problem, shape) for all 6 pairs", f"{ms:.2f} ms"))
            ms, res = timed(lambda: log.best("kda", "bench", device="NVIDIA H200"))
            rows.append(("best(problem, shape, device)", f"{ms:.2f} ms"))
            ms, res = timed(log.best_all, repeat=3)
            rows.append(("best_all() (window over every attempt)", f"{ms:.0f} ms"))
            ms, res = timed(log.failures_by_class, repeat=3)
            rows.append(("failures_by_class()", f"{ms:.0f} ms"))
            ms, res = timed(lambda: log.failures_by_class(problem="kda"), repeat=3)
            rows.append(("failures_by_class(problem)", f"{ms:.0f} ms"))
            ms, res = timed(lambda: log.notes(problem="kda"))
            rows.append(("notes(problem), newest 50", f"{ms:.2f} ms"))
            ms, res = timed(log.runs, repeat=3)
            rows.append((f"runs() ({len(res)} runs)", f"{ms:.0f} ms"))
            ms, res = timed(lambda: log.last_event(run_id="run0", kind="budget"))
            rows.append(("last_event(run_id, kind)", f"{ms:.2f} ms"))

        import sqlite3

        print(f"event log benchmark: SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
              f"{os.cpu_count()} CPUs, databases in {directory.parent}")
        width = max(len(a) for a, _ in rows)
        print(f"| {'what':<{width}} | result |")
        print(f"| {'-' * width} | --- |")
        for a, b in rows:
            print(f"| {a:<{width}} | {b} |")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
