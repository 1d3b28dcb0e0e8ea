"""Profile overhead, repeatability and agreement with Nsight Compute, on a GPU.

    python benchmarks/bench_profile.py [--problem softmax] [--shape bench] [--repeats 5] [--ncu]

Overhead: wall time of a `profile` call on a warm worker minus the timed loop itself (the issue's
budget: 1.5 s). Repeatability: the spread of the medians of `--repeats` profiles of one kernel
((max - min) / mean). Agreement: the profile's median against ncu's gpu__time_duration for the same
kernel (the eager median includes the launch; the graph median does not).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from kernels import starter_path
from server.service import Service


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default="softmax")
    ap.add_argument("--shape", default="bench")
    ap.add_argument("--file", help="candidate (default: the problem's starter)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--graph", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--ncu", action="store_true", help="also measure with Nsight Compute")
    ap.add_argument("--json-out", help="write every figure here")
    args = ap.parse_args()
    source = Path(args.file).read_text() if args.file else starter_path(args.problem).read_text()
    graph = {"auto": None, "on": True, "off": False}[args.graph]
    svc = Service()
    try:
        t0 = time.perf_counter()
        svc.pool.warm()
        warm_s = time.perf_counter() - t0
        rows = []
        for i in range(args.repeats + 1):  # the first call also measures the GPU's ceilings once
            t = time.perf_counter()
            r = svc.profile(args.problem, source, args.shape, graph=graph).as_dict()
            wall = time.perf_counter() - t
            if not r.get("correct"):
                print(json.dumps(r, indent=1, default=str)[:3000])
                return 1
            loop = r["timing_loop"]["wall_s"]
            rows.append({"call": i, "wall_s": wall, "timed_loop_s": loop, "overhead_s": wall - loop,
                         "median_us": r["timing"]["median_us"], "iqr_pct": r["timing"]["spread_pct"],
                         "mode": r["timing"]["mode"], "baseline_us": (r.get("baseline") or {}).get("median_us"),
                         "speedup": r.get("speedup"), "sm_mhz": (r["telemetry"]["after"] or {}).get("sm_clock_mhz")})
        print(f"pool start (import torch+triton in the worker): {warm_s:.2f} s")
        print(f"{'call':>4} {'wall s':>7} {'loop s':>7} {'overhead s':>10} {'median us':>10} {'IQR %':>6} "
              f"{'mode':>10} {'base us':>9} {'speedup':>7} {'SM MHz':>6}")
        for row in rows:
            print(f"{row['call']:>4} {row['wall_s']:7.2f} {row['timed_loop_s']:7.2f} {row['overhead_s']:10.2f} "
                  f"{row['median_us']:10.2f} {row['iqr_pct']:6.1f} {row['mode']:>10} "
                  f"{row['baseline_us'] or 0:9.2f} {row['speedup'] or 0:7.2f} {row['sm_mhz'] or 0:>6}")
        warm = rows[1:]
        medians = [r["median_us"] for r in warm]
        spread = (max(medians) - min(medians)) / statistics.fmean(medians) * 100
        summary = {"problem": args.problem, "shape": args.shape, "repeats": len(warm),
                   "overhead_s_max": max(r["overhead_s"] for r in warm),
                   "overhead_s_median": statistics.median(r["overhead_s"] for r in warm),
                   "median_of_medians_us": statistics.median(medians), "medians_spread_pct": spread,
                   "rows": rows}
        print(f"overhead on a warm worker: median {summary['overhead_s_median']:.2f} s, "
              f"max {summary['overhead_s_max']:.2f} s")
        print(f"repeatability: {len(warm)} medians, (max-min)/mean = {spread:.2f}%")
        if args.ncu:
            from tools.ncu import ncu_metrics

            n = ncu_metrics(args.problem, source, args.shape)
            summary["ncu"] = n
            if n.get("ok"):
                ncu_us = n["gpu_time_us_per_call"]
                diff = (summary["median_of_medians_us"] - ncu_us) / ncu_us * 100
                summary["ncu_vs_profile_pct"] = diff
                print(f"ncu gpu__time_duration per call: {ncu_us:.2f} us; profile median "
                      f"{summary['median_of_medians_us']:.2f} us ({diff:+.1f}%)")
            else:
                print(f"ncu: {n.get('error')}")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(summary, indent=1, default=str))
    finally:
        svc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
