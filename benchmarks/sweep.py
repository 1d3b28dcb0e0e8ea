"""Sweep a kernel's launch constants through the project's own compile / profile path.

    python benchmarks/sweep.py kernels/mla_decode/solution.py --problem mla_decode --shape bench \
        --grid BLOCK_H=16,32,64 --grid NUM_WARPS=4,8 [--graph on] [--l2 warm] [--compile-only] [--json-out F]
    python benchmarks/sweep.py FILE --problem P --top-from F --top 3 --grid SPLIT_WAVES=0.5,1,2

Every variant is the file with module-level constants rewritten (the tuner's `rewrite`), sent
through `Service.compile` (sm_90 resources; works without a GPU) or `Service.profile` (checked,
timed against the problem's baseline, logged as an attempt like any other). Names left out of
`--grid` keep their value in the file. Prints a table sorted by median time (or by registers).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import time
from pathlib import Path
from typing import Any

from client.tuner import module_constants, rewrite
from server.service import Service


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    grid: dict[str, list[Any]] = {}
    for item in items:
        name, _, values = item.partition("=")
        if not name or not values:
            raise SystemExit(f"--grid wants NAME=v1,v2,...; got {item!r}")
        grid[name] = [ast.literal_eval(v) for v in values.split(",")]
    return grid


def kernel_rows(report: dict[str, Any]) -> list[str]:
    return [f"{k.get('name')}: {k.get('registers')} regs, {k.get('spill_bytes', 0)} B spilled, "
            f"{k.get('shared_bytes')} B shared" for k in report.get("kernels", [])]


def first_error(report: dict[str, Any]) -> str:
    messages = [report.get("error") or ""] + [e.get("message", "") for e in report.get("errors") or []]
    return next((m for m in messages if m), "")[:300]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--problem", required=True)
    ap.add_argument("--shape", action="append", help="repeatable (default bench)")
    ap.add_argument("--grid", action="append", default=[], help="NAME=v1,v2,... (repeatable)")
    ap.add_argument("--graph", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--baseline", help="baseline to time against (default: the problem's first available)")
    ap.add_argument("--l2", choices=["cold", "warm"], default="cold", help="the L2 before each timed rep")
    ap.add_argument("--top-from", help="a JSON of an earlier sweep: cross its --top fastest configs at the (first)"
                                       " shape with --grid")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--compile-only", action="store_true", help="report sm_90 resources only (no GPU needed)")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    base = Path(args.file).read_text()
    grid = parse_grid(args.grid)
    unknown = sorted(set(grid) - module_constants(base))
    if unknown:  # rewrite() would leave the file as it is: N identical variants that look like a sweep
        raise SystemExit(f"{args.file} has no module-level constant named {', '.join(unknown)}")
    shapes = args.shape or ["bench"]
    graph = {"auto": None, "on": True, "off": False}[args.graph]
    configs = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())] or [{}]
    if args.top_from:
        earlier = [r for r in json.loads(Path(args.top_from).read_text())
                   if r.get("median_us") and r.get("shape") == shapes[0]]
        if not earlier:
            raise SystemExit(f"{args.top_from} has no timed variant at {shapes[0]} to start from "
                             "(a CPU sweep times nothing)")
        best: list[dict[str, Any]] = []
        for r in sorted(earlier, key=lambda r: r["median_us"]):
            if r["config"] not in best:
                best.append(r["config"])
        configs = [{**b, **c} for b in best[: args.top] for c in configs]
    svc = Service()
    rows: list[dict[str, Any]] = []
    try:
        for shape in shapes:
            for i, config in enumerate(configs):
                source = rewrite(base, config)
                t0 = time.perf_counter()
                if args.compile_only:
                    r = svc.compile(args.problem, source, shape).as_dict()
                else:
                    r = svc.profile(args.problem, source, shape, graph=graph, baseline=args.baseline,
                                    l2=args.l2).as_dict()
                timing = r.get("timing") or {}
                row = {"shape": shape, "config": config, "ok": bool(r.get("ok")),
                       "correct": r.get("correct"), "error_class": r.get("error_class"),
                       "error": first_error(r), "median_us": timing.get("median_us"),
                       "iqr_pct": timing.get("spread_pct"), "mode": timing.get("mode"),
                       "baseline_us": (r.get("baseline") or {}).get("median_us"), "speedup": r.get("speedup"),
                       "gbps": (r.get("achieved") or {}).get("gbps"), "kernels": kernel_rows(r),
                       "attempt_id": r.get("attempt_id"), "wall_s": time.perf_counter() - t0}
                rows.append(row)
                status = (f"{row['median_us']:.2f} us" if row["median_us"] else
                          ("ok" if row["ok"] else f"{row['error_class']}: {row['error'][:120]}"))
                print(f"[{shape} {i + 1}/{len(configs)}] {config} -> {status} "
                      f"{'; '.join(row['kernels'])}", flush=True)
    finally:
        svc.close()
    print()
    for shape in shapes:
        done = [r for r in rows if r["shape"] == shape and r["median_us"]]
        done.sort(key=lambda r: r["median_us"])
        for r in done[:15]:
            print(f"{shape:>10} {r['median_us']:9.2f} us  IQR {r['iqr_pct'] or 0:5.1f}%  {r['mode']:>10}  "
                  f"base {r['baseline_us'] or 0:9.2f}  x{r['speedup'] or 0:6.2f}  {(r['gbps'] or 0):7.0f} GB/s  "
                  f"{r['config']}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
