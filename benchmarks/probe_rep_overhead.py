"""Where a timed rep's untimed work goes, on a GPU: the refill's and the digest's host and GPU times, the judge's
calibration of the whole at each load, and the host cost of single torch ops a refill may use.

A rep whose untimed work takes the host nearly as long as the GPU lets the reps catch up with the GPU, and the
bracket then refuses honest kernels (BENCHMARKS.md, "Fourth session on the judged path").
Usage (from the project root, after the device preamble): python benchmarks/probe_rep_overhead.py [PROBLEM] [SHAPE]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from kernels import get_problem
from kernels.spec import as_outputs
from tools.timing import DIGEST_WORDS, MAX_LOAD, Calibration, commit_outputs, keeps_gpu_ahead


def host_us(fn: Callable[[int], Any], n: int = 30) -> float:
    """Median host time of one call, the GPU drained between calls (what queueing it costs the host)."""
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def gpu_us(fn: Callable[[int], Any], n: int = 30) -> float:
    """Median time between events around one call, from an idle GPU (at least its host time, where that is longer)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(n):
        torch.cuda.synchronize()
        start.record()
        fn(i)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def op_costs() -> None:
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.empty(4096, 8192, device="cuda")
    index = torch.zeros(512, dtype=torch.int64, device="cuda")
    values = torch.ones(512, device="cuda")
    ops: dict[str, Callable[[int], Any]] = {
        "normal_ of 32M floats": lambda i: x.normal_(0.0, 2.0, generator=gen),
        "randperm(4096)": lambda i: torch.randperm(4096, generator=gen, device="cuda"),
        "randint(8192, (512,))": lambda i: torch.randint(8192, (512,), generator=gen, device="cuda"),
        "scatter_add_ of 512": lambda i: x.view(-1).scatter_add_(0, index, values),
        "index_put_ accumulate": lambda i: x.view(-1).index_put_((index,), values, accumulate=True),
    }
    for name, fn in ops.items():
        print(f"op {name:28s} host {host_us(fn, 60):8.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem", nargs="?", default="softmax")
    ap.add_argument("shape", nargs="?", default="bench")
    args = ap.parse_args()
    problem, shape = get_problem(args.problem), args.shape
    inputs = problem.inputs(shape, 1, "cuda")
    buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    refs = as_outputs(problem.reference(*inputs))
    out_specs = [(tuple(r.shape), getattr(torch, problem.dtype_for(name, "cuda")))
                 for name, r in zip(problem.output_names, refs)]
    outs = [torch.zeros(s, dtype=d, device="cuda") for s, d in out_specs]
    row = torch.zeros((len(outs), DIGEST_WORDS), dtype=torch.int32, device="cuda")
    print(f"{problem.name} {shape}: outputs {[s for s, _ in out_specs]}")
    refill = lambda i: problem.refill(buffers, shape, i, row)  # noqa: E731  (a rep's: keyed by the digest before)
    digest = lambda i: commit_outputs(outs, row, gpu=True)  # noqa: E731
    print(f"refill host {host_us(refill):.1f} us, GPU {gpu_us(refill):.1f} us")
    print(f"digest host {host_us(digest):.1f} us, GPU {gpu_us(digest):.1f} us")
    base = Calibration("cold")
    load = 1
    while load <= MAX_LOAD:
        calib = base.in_regime("cold", load)
        runs = [calib.overhead_us(lambda b, i, key: problem.refill(b, shape, i, key), inputs, out_specs, slots=32,
                                  graph=True) for _ in range(4)][1:]
        def listed(values: list[float]) -> str:
            return ", ".join(f"{v:.1f}" for v in values)

        print(f"load {load}: overhead {listed([r.us for r in runs])} us; queued {listed([r.queued_us for r in runs])}"
              f" us; host {listed([r.host_us for r in runs])} us; GPU ahead: {keeps_gpu_ahead(runs)}")
        load *= 2
    op_costs()


if __name__ == "__main__":
    main()
