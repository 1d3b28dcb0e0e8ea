"""Per-kernel GPU time of a KDA forward: the project's solution and FLA's chunk_kda, side by side.

    python benchmarks/kda_parts.py [--shape bench] [--set AKK_BF16=0] [--no-fla] [--repeats 20]

The profile tool times a whole entry(); this says which kernel the time is in, from the CUDA activity
records of torch.profiler (device time of each kernel, averaged over the repeats, warm L2 and caches).
FLA autotunes on its first call at a shape (a minute or two); that call is not counted.
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def load_solution(path: Path, settings: list[str]) -> Any:
    spec = importlib.util.spec_from_file_location("kda_solution", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for item in settings:
        name, _, value = item.partition("=")
        if not hasattr(module, name):
            raise SystemExit(f"--set {item}: the solution has no constant {name}")
        setattr(module, name, ast.literal_eval(value))
    return module


def kernel_times(fn: Callable[[], object], repeats: int) -> tuple[float, list[tuple[str, float, int]]]:
    """(wall us per call, [(kernel, device us per call, launches per call)]) over `repeats` calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        torch.cuda.synchronize()
    total: dict[str, float] = collections.defaultdict(float)
    count: dict[str, int] = collections.defaultdict(int)
    for event in prof.events():
        if event.device_type.name == "CUDA":
            total[event.name] += event.device_time
            count[event.name] += 1
    rows = sorted(((name, us / repeats, count[name] // repeats) for name, us in total.items()),
                  key=lambda row: -row[1])
    return start.elapsed_time(end) * 1000 / repeats, rows


def print_rows(title: str, wall_us: float, rows: list[tuple[str, float, int]]) -> None:
    busy = sum(us for _, us, _ in rows)
    print(f"\n{title}: {wall_us:.1f} us a call (wall, back to back), kernels {busy:.1f} us")
    for name, us, launches in rows:
        print(f"  {us:9.1f} us  {100 * us / busy:5.1f}%  x{launches}  {name[:90]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="bench")
    ap.add_argument("--file", default=str(ROOT / "kernels" / "kda" / "solution.py"))
    ap.add_argument("--set", action="append", default=[], help="NAME=value: a module constant of the solution")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()

    from kernels.kda.problem import PROBLEM

    inputs = PROBLEM.inputs(args.shape, 0, "cuda")
    solution = load_solution(Path(args.file), args.set)
    print(f"kda/{args.shape} {PROBLEM.dims(args.shape)}")
    print_rows(f"solution {' '.join(args.set) or '(defaults)'}", *kernel_times(lambda: solution.entry(*inputs),
                                                                             args.repeats))
    if not args.no_fla:
        fla = next(b for b in PROBLEM.baselines if b.name == "fla_chunk_kda")
        print_rows("FLA chunk_kda", *kernel_times(lambda: fla.fn(*inputs), args.repeats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
