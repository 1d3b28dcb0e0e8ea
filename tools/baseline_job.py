"""The `baseline` job inside a worker: each baseline of a problem, checked, then timed eager and as a graph.

Baselines may use any library. Each is verified against the reference before it is timed (a fast
wrong baseline would flatter every candidate), and each timing mode is reported separately, with
the reason where a mode cannot run (torch.compile under graph capture, FLA not installed, no GPU).
"""

from __future__ import annotations

import secrets
import traceback
from typing import Any

from kernels import get_problem
from kernels.spec import as_outputs, compare
from tools import telemetry
from tools.reports import BaselineResult, built


def run_baselines(worker: Any, job: dict[str, Any]) -> BaselineResult:
    return built(BaselineResult, _baselines(worker, job))


def _baselines(worker: Any, job: dict[str, Any]) -> dict[str, Any]:
    problem = get_problem(job["problem"])
    shape = job.get("shape") or "bench"
    dims = problem.dims(shape)
    wanted = job.get("baselines")
    chosen = [b for b in problem.baselines if not wanted or b.name in wanted]
    out: dict[str, Any] = {"ok": True, "problem": problem.name, "shape": shape, "device": worker.device_info,
                           "baselines": []}
    if not worker.cuda:
        out["timing_note"] = "no GPU: baselines are timed on a GPU only; nothing was timed"
        out["baselines"] = [{"name": b.name, "description": b.description, "timing": None,
                             "available": False, "reason": "no GPU"} for b in chosen]
        return out
    timer = worker.ensure_timer().timer
    inputs = problem.inputs(shape, secrets.randbits(31), "cuda")
    refs = as_outputs(problem.reference(*inputs))
    flops, nbytes = problem.flops(dims), problem.bytes(dims)
    before = telemetry.snapshot()
    for i, b in enumerate(chosen):
        entry: dict[str, Any] = {"name": b.name, "description": b.description}
        why = b.available()
        if why is not None:
            out["baselines"].append({**entry, "available": False, "reason": why, "timing": None})
            continue
        worker.progress(f"baseline {b.name}: warm-up and check", i, len(chosen))
        fn = b.fn
        try:
            outs = as_outputs(fn(*inputs))
            worker.torch.cuda.synchronize()
            errs = {name: compare(o, r, problem.tolerance_for(name))
                    for name, o, r in zip(problem.output_names, outs, refs)}
            entry["max_rel_err"] = max(e["rel_err"] for e in errs.values())
            entry["correct"] = all(e["ok"] for e in errs.values())
        except Exception as exc:
            out["baselines"].append({**entry, "available": False, "timing": None,
                                     "reason": f"{type(exc).__name__}: {exc}",
                                     "internal": traceback.format_exc()[-1500:]})
            continue
        entry["available"] = True
        entry["timing"] = {}
        for mode, graph in (("eager", False), ("cuda_graph", True)):
            worker.progress(f"baseline {b.name}: timing ({mode})", i, len(chosen))
            try:
                stats = timer.measure({b.name: (lambda fn=fn: fn(*inputs))}, graph=graph,
                                      budget_s=float(job.get("budget_s", 1.5)))[b.name]
                median_s = stats["median_us"] * 1e-6
                stats["gbps"] = nbytes / median_s / 1e9
                stats["tflops"] = flops / median_s / 1e12
                entry["timing"][mode] = stats
            except Exception as exc:
                entry["timing"][mode] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
                worker.torch.cuda.synchronize()
        out["baselines"].append(entry)
    out["telemetry"] = {"before": before, "after": telemetry.snapshot()}
    out["ceilings"] = worker.ceilings
    return out
