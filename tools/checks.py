"""Correctness of a candidate on fresh inputs, with the known exploits closed (DESIGN.md §4).

Each trial draws new inputs from a new seed, computes the reference (float32 or better) outside the
guard, poisons the memory the candidate's outputs are likely to reuse, runs `entry()` under the
compute guard, and checks every output against the problem's tolerance and every input for changes.
The same loaded module serves every trial, so results cached across inputs are caught.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kernels.spec import Problem, as_outputs, compare
from tools.guard import candidate_guard


class CandidateRaised(Exception):
    """The candidate's own code raised: its exception is the cause, reported with the candidate's line."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class TrialFailure(Exception):
    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message


def _poison(device: str, nbytes: int) -> None:
    """Fill memory the allocator will hand out next with NaN, so unwritten outputs show as NaN."""
    import torch

    if nbytes <= 0:
        return
    block = torch.empty(nbytes // 4 + 1, dtype=torch.float32, device=device)
    block.fill_(float("nan"))
    del block


def _expected_bytes(refs: tuple[Any, ...]) -> int:
    return sum(r.numel() * 4 for r in refs)


def run_trial(problem: Problem, entry: Callable[..., Any], shape: str, seed: int, device: str,
              guard: bool = True) -> dict[str, Any]:
    """One trial: returns per-output errors; raises TrialFailure on wrong shapes or mutated inputs."""
    import torch

    inputs = problem.inputs(shape, seed, device)
    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    refs = as_outputs(problem.reference(*inputs))
    _poison(device, _expected_bytes(refs))
    try:
        with candidate_guard(guard):
            raw = entry(*inputs)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    except Exception as exc:
        raise CandidateRaised(exc) from exc
    try:
        outs = as_outputs(raw)
    except TypeError as exc:
        raise TrialFailure("wrong_output", f"entry() returned the wrong thing: {exc}") from None
    if len(outs) != len(refs):
        raise TrialFailure("wrong_output", f"entry() returned {len(outs)} outputs; expected {len(refs)} "
                                           f"({', '.join(problem.output_names)})")
    for i, (x, x0) in enumerate(zip(inputs, before)):
        if isinstance(x, torch.Tensor) and not torch.equal(x, x0):
            raise TrialFailure("input_mutated", f"entry() modified its input #{i}: inputs must be left unchanged")
    results = []
    for name, out, ref in zip(problem.output_names, outs, refs):
        if tuple(out.shape) != tuple(ref.shape):
            raise TrialFailure("wrong_shape", f"output '{name}' has shape {tuple(out.shape)}; "
                                              f"expected {tuple(ref.shape)}")
        r = compare(out, ref, problem.tolerance_for(name))
        results.append({"output": name, **r})
    return {"shape": shape, "seed": seed, "ok": all(r["ok"] for r in results), "outputs": results}


def check_candidate(problem: Problem, entry: Callable[..., Any], plan: list[tuple[str, int]], device: str,
                    progress: Callable[[str], None] | None = None, guard: bool = True) -> dict[str, Any]:
    """Run every (shape, seed) trial of the plan; stop at the first failing trial."""
    trials: list[dict[str, Any]] = []
    worst = 0.0
    for shape, seed in plan:
        if progress:
            progress(f"checking {shape} (seed {seed})")
        try:
            trial = run_trial(problem, entry, shape, seed, device, guard)
        except TrialFailure as exc:
            trials.append({"shape": shape, "seed": seed, "ok": False, "error_class": exc.error_class,
                           "error": exc.message})
            return {"correct": False, "error_class": exc.error_class, "error": exc.message,
                    "max_rel_err": None, "trials": trials}
        trials.append(trial)
        worst = max([worst] + [o["rel_err"] for o in trial["outputs"]])
        if not trial["ok"]:
            bad = next(o for o in trial["outputs"] if not o["ok"])
            nonfinite = "non-finite" in bad["reason"]
            message = f"output '{bad['output']}' at shape {shape} (seed {seed}): {bad['reason']}"
            return {"correct": False, "error_class": "nan" if nonfinite else "incorrect", "error": message,
                    "max_rel_err": None if math.isinf(worst) else worst, "trials": trials}
    return {"correct": True, "error_class": None, "error": None, "max_rel_err": worst, "trials": trials}
