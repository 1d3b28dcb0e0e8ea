"""The `profile` job inside a worker: guard, load, check on fresh inputs, time against a baseline.

Without a GPU the checks run under the Triton interpreter at the problem's small check shapes and
the result says plainly that nothing was timed.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

from kernels import get_problem
from kernels.spec import Problem, as_outputs, compare
from tools import guard, telemetry
from tools.candidate import (
    GluonNeedsGpu,
    describe_exception,
    gluon_launches_refused,
    load_candidate,
    write_candidate,
)
from tools.checks import CandidateRaised, check_candidate
from tools.timing import GRAPH_BELOW_US

TRIALS_AT_SHAPE = 3
TRIALS_PER_CHECK_SHAPE = 2


def _fail(error_class: str, error: str, line: int | None = None, **extra: Any) -> dict[str, Any]:
    return {"ok": False, "correct": False, "error_class": error_class, "error": error, "error_line": line,
            "max_rel_err": None, "timing": None, "speedup": None, **extra}


def _check_plan(worker: Any, problem: Problem, shape: str) -> list[tuple[str, int]]:
    shapes = [shape] if worker.cuda else []
    plan = [(s, worker.fresh_seed()) for s in shapes for _ in range(TRIALS_AT_SHAPE)]
    for check in problem.check_shapes:
        if check != shape or not worker.cuda:
            plan += [(check, worker.fresh_seed()) for _ in range(TRIALS_PER_CHECK_SHAPE)]
    return plan


def primary_baseline(problem: Problem, requested: str | None) -> tuple[Any, str | None]:
    """The baseline to time against: the requested one, else the first that can run here."""
    if requested:
        b = problem.baseline(requested)
        return b, b.available()
    reasons = []
    for b in problem.baselines:
        why = b.available()
        if why is None:
            return b, None
        reasons.append(f"{b.name}: {why}")
    return None, "; ".join(reasons) or "the problem has no baseline"


def run_profile(worker: Any, job: dict[str, Any]) -> dict[str, Any]:
    problem = get_problem(job["problem"])
    shape = job.get("shape") or "bench"
    problem.dims(shape)
    source = job["source"]
    base = {"problem": problem.name, "shape": shape, "device": worker.device_info}

    violations = guard.static_check(source)
    if violations:
        first = violations[0]
        syntax = first.message.startswith("SyntaxError")
        return {**base, **_fail("syntax_error" if syntax else "rejected",
                                "; ".join(v.message + (f" (line {v.line})" if v.line else "") for v in violations),
                                first.line), "violations": [v.to_dict() for v in violations]}

    path = write_candidate(source, Path.cwd() / "candidates")
    worker.progress("loading candidate")
    try:
        with guard.candidate_guard():
            module = load_candidate(path)
    except BaseException as exc:
        d = describe_exception(exc, path)
        cls = "rejected" if isinstance(exc, (ImportError, guard.TorchComputeRefused)) and "refused" in str(exc) \
            else "import_error"
        return {**base, **_fail(cls, d["message"], d["line"])}

    entry = module.entry
    plan = _check_plan(worker, problem, shape)
    try:
        # Without a GPU a Gluon kernel's launch is refused (the interpreter cannot run it); a candidate whose
        # entry() takes Triton kernels there is checked like any other.
        with nullcontext() if worker.cuda else gluon_launches_refused():
            check = check_candidate(problem, entry, plan, worker.device, progress=worker.progress)
    except CandidateRaised as exc:
        if isinstance(exc.cause, GluonNeedsGpu):
            return {**base, **_fail("needs_gpu", f"entry() launched the Gluon kernel {exc.cause.kernel}: Gluon "
                                    "kernels run only on a GPU, and the Triton interpreter that checks candidates "
                                    "on this machine cannot execute them. `compile` reports their sm_90 resources "
                                    "here; check and time them where a GPU is present.")}
        return {**base, **_runtime_failure(worker, exc.cause, path)}
    result: dict[str, Any] = {
        **base, "ok": check["correct"], "correct": check["correct"], "error_class": check["error_class"],
        "error": check["error"], "error_line": None, "max_rel_err": check["max_rel_err"],
        "trials": check["trials"], "shapes_checked": sorted({s for s, _ in plan}), "timing": None,
        "speedup": None, "baseline": None,
    }
    if not check["correct"]:
        return result
    if not worker.cuda:
        result["timing_note"] = ("no GPU: correctness was checked under the Triton interpreter at the small "
                                 f"check shapes ({', '.join(result['shapes_checked'])}); no timing was taken")
        return result
    if not job.get("timing", True):
        result["timing_note"] = "timing not requested"
        return result
    try:
        result.update(_time(worker, problem, shape, entry, job))
    except BaseException as exc:
        failure = _runtime_failure(worker, exc, path)
        if failure["error_class"] == "runtime_error" and failure["error_line"] is None:
            # No frame of the candidate's in the traceback: the fault is ours, not the candidate's.
            failure["error_class"] = "internal_error"
        return {**base, **failure, "trials": check["trials"]}
    return result


def _runtime_failure(worker: Any, exc: BaseException, path: Path) -> dict[str, Any]:
    d = describe_exception(exc, path)
    if isinstance(exc, guard.TorchComputeRefused):
        return _fail("rejected", d["message"], d["line"])
    if isinstance(exc, ImportError) and "refused" in str(exc):
        return _fail("rejected", d["message"], d["line"])
    if worker.context_is_broken(exc):
        return {**_fail("cuda_error", d["message"] + " (the CUDA context was lost; the worker is replaced)",
                        d["line"]), "_fatal": True}
    return _fail("runtime_error", d["message"], d["line"])


def _time(worker: Any, problem: Problem, shape: str, entry: Any, job: dict[str, Any]) -> dict[str, Any]:
    torch = worker.torch
    timer = worker.ensure_timer()
    dims = problem.dims(shape)
    seed = worker.fresh_seed()
    inputs = problem.inputs(shape, seed, "cuda")
    baseline, why_not = primary_baseline(problem, job.get("baseline"))

    def guarded() -> Any:
        with guard.candidate_guard():
            return entry(*inputs)

    fns: dict[str, Any] = {"candidate": guarded}
    out_baseline: dict[str, Any] | None = None
    if baseline is not None and why_not is None:
        bfn = baseline.fn
        fns["baseline"] = lambda: bfn(*inputs)
    else:
        out_baseline = {"name": getattr(baseline, "name", None), "error": why_not}

    mode = job.get("graph", "auto")
    if mode == "auto":
        # The pilot runs unguarded, as the eager reps do: the guard's host overhead per torch op is not the
        # candidate's time. Guarded, the pilot of a ~20 us kernel is mostly host time: the MLA solution at
        # bench was timed as a graph in one profile and eagerly in the next (H200, same code).
        worker.progress("pilot timing")
        graph = timer.pilot_us(lambda: entry(*inputs)) < GRAPH_BELOW_US
    else:
        graph = bool(mode)
    if not graph:
        # Eager reps run unguarded: the dispatch mode's host overhead would land inside the timed
        # region. The guarded trials before and the guarded check of a timed output below bracket it.
        fns["candidate"] = lambda: entry(*inputs)
    before = telemetry.snapshot()
    worker.progress("timing", 0, 1)
    stats = timer.measure(fns, graph=graph, budget_s=float(job.get("budget_s", 2.0)),
                          progress=lambda d, t: worker.progress("timing", d, t))
    after = telemetry.snapshot()

    # The outputs of timed calls are checked too: a candidate may not behave differently when timed.
    refs = as_outputs(problem.reference(*inputs))
    with guard.candidate_guard():
        outs = as_outputs(entry(*inputs))
    torch.cuda.synchronize()
    for name, o, r in zip(problem.output_names, outs, refs):
        verdict = compare(o, r, problem.tolerance_for(name))
        if not verdict["ok"]:
            return {"ok": False, "correct": False, "error_class": "incorrect",
                    "error": f"output '{name}' after timing: {verdict['reason']}"}

    cand = stats["candidate"]
    median_s = cand["median_us"] * 1e-6
    flops, nbytes = problem.flops(dims), problem.bytes(dims)
    ceil = worker.ceilings or {}
    achieved = {
        "gbps": nbytes / median_s / 1e9,
        "tflops": flops / median_s / 1e12,
        "dram_share": nbytes / median_s / 1e9 / ceil["dram_gbps"] if ceil.get("dram_gbps") else None,
        "bf16_share": flops / median_s / 1e12 / ceil["bf16_tflops"] if ceil.get("bf16_tflops") else None,
        "floor_us": max(nbytes / (ceil.get("dram_gbps", 1) * 1e9), flops / (ceil.get("bf16_tflops", 1) * 1e12))
        * 1e6 if ceil else None,
    }
    speedup = None
    if "baseline" in stats:
        out_baseline = {"name": baseline.name, **stats["baseline"]}
        speedup = stats["baseline"]["median_us"] / cand["median_us"]
    return {"ok": True, "timing": {**cand, "seed": seed}, "baseline": out_baseline, "speedup": speedup,
            "achieved": achieved, "ceilings": ceil, "telemetry": {"before": before, "after": after},
            "timing_loop": stats["_loop"]}
