"""Nsight Compute's view of a candidate's kernels, where `ncu` exists: an independent check of the timer.

`ncu_metrics()` runs the candidate in a fresh process under `ncu --clock-control none` (the clocks are
left as the machine has them, as the event timer sees them) and returns, per kernel, the median of
`gpu__time_duration.sum` and a few throughput metrics over the profiled calls. The same file run
as `python -m tools.ncu TARGET.json` is that process; finding ncu and starting it under ncu are
tools.ncu_run's, shared with tools.hotspots.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.ncu_run import (
    TARGET_LOG,
    MalformedReport,
    detach_output,
    dump_cubins,
    find_ncu,
    report_rows,
    run_target,
    target_output,
)

METRICS = ("gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed", "launch__registers_per_thread")
WARMUP_CALLS = 2
PROFILED_CALLS = 5


def ncu_metrics(problem: str, source: str, shape: str = "bench", timeout: float = 300.0) -> dict[str, Any]:
    ncu = find_ncu()
    if ncu is None:
        return {"ok": False, "error": "ncu (Nsight Compute) is not installed here"}
    with tempfile.TemporaryDirectory(prefix="marathon-ncu-") as tmp:
        try:
            proc = run_target(ncu, Path(tmp), ["--csv", "--metrics", ",".join(METRICS)], timeout, problem, shape,
                              source)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"ncu took longer than {timeout:.0f} s"}
        printed = target_output(Path(tmp))
    try:
        summary = summarize_csv(proc.stdout)
    except MalformedReport as exc:
        return {"ok": False, "error": f"ncu's report was malformed: {exc}"}
    if proc.returncode != 0 or summary is None:
        return {"ok": False, "error": f"ncu exited with {proc.returncode}: "
                                      f"{(printed or proc.stderr or proc.stdout)[-1500:]}"}
    return summary


def summarize_csv(text: str, calls: int = PROFILED_CALLS) -> dict[str, Any] | None:
    """Per-kernel medians of ncu's --csv output, and the kernel time per call of entry(). Raises MalformedReport."""
    rows = report_rows(text)
    if not rows:
        return None
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
             "second": 1e6}
    kernels: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        name = row.get("Kernel Name", "?")
        metric, value, unit = row.get("Metric Name"), row.get("Metric Value", ""), row.get("Metric Unit", "")
        if not metric:
            continue
        try:
            number = float(value.replace(",", ""))
        except ValueError:
            continue
        if metric == "gpu__time_duration.sum":
            if unit not in scale:
                raise ValueError(f"unexpected unit {unit!r} for gpu__time_duration")
            number *= scale[unit]
            metric = "gpu_time_us"
        kernels.setdefault(name, {}).setdefault(metric, []).append(number)
    per_kernel = {name: {m: statistics.median(v) for m, v in metrics.items()} | {"launches": len(
        metrics.get("gpu_time_us", []))} for name, metrics in kernels.items()}
    total = sum(k.get("gpu_time_us", 0.0) * k["launches"] for k in per_kernel.values()) / calls
    return {"ok": True, "kernels": per_kernel, "gpu_time_us_per_call": total, "calls": calls}


def _target(path: str) -> int:
    """Inside ncu: warm up (JIT) outside the profiled NVTX range, then call entry() PROFILED_CALLS times
    (or the target's "calls"), and write the kernels' cubins where the target names a "cubin_dir"."""
    import torch

    from kernels import get_problem
    from tools.candidate import load_candidate
    from tools.sandbox import confine

    spec = json.loads(Path(path).read_text())
    detach_output(Path(spec["candidate"]).parent / TARGET_LOG)
    problem = get_problem(spec["problem"])
    inputs = problem.inputs(spec["shape"], 1234, "cuda")
    confine(Path(spec["candidate"]).parent, cuda=True)  # writes only to its work folder (cubins go there too)
    module = load_candidate(Path(spec["candidate"]))
    for _ in range(WARMUP_CALLS):
        module.entry(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("profiled")
    for _ in range(spec.get("calls", PROFILED_CALLS)):
        module.entry(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    if spec.get("cubin_dir"):  # for tools.hotspots: the line tables of what just ran
        dump_cubins(module, Path(spec["cubin_dir"]))
    return 0


if __name__ == "__main__":
    sys.exit(_target(sys.argv[1]))
