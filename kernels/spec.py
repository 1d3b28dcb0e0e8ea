"""The contract every problem in the suite fulfils.

A problem folder (`kernels/<name>/problem.py`) builds one `Problem` and names it `PROBLEM`.
The tools only ever talk to a problem through this class, so adding a problem never touches them.
Imports stay at torch (no numpy, no mcp, no pydantic): the GPU worker loads problems too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernels.draws import ChainedDraws, Draws

Dims = Mapping[str, int]
Inputs = tuple[Any, ...]
Outputs = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class Tolerance:
    """When an output counts as correct.

    Both tests must pass for every output tensor: the relative Frobenius error
    ||out - ref|| / ||ref|| at most `rel_err`, and elementwise |out - ref| <= atol + rtol * |ref|.
    Non-finite values never pass.
    """

    rel_err: float
    atol: float
    rtol: float


@dataclass(frozen=True)
class Baseline:
    """A way to compute the problem that candidates are timed against.

    Baselines may use any library. `available` says why one cannot run here (None: it can).
    Warm-up (JIT, autotune, torch.compile) happens in the timer's untimed first calls; CUDA-graph
    replay is a timing mode the tools apply to any baseline, not a baseline of its own.
    """

    name: str
    fn: Callable[..., Any]
    description: str
    available: Callable[[], str | None] = lambda: None
    needs_gpu: bool = False


@dataclass(frozen=True)
class Problem:
    """One optimisation problem: shapes, inputs, reference, tolerance, cost model and baselines."""

    name: str
    summary: str
    description: str
    shapes: Mapping[str, Dims]
    make_inputs: Callable[[Dims, int, str, torch.dtype | None], Inputs]
    reference: Callable[..., Outputs]
    tolerance: Tolerance
    flops: Callable[[Dims], float]
    bytes: Callable[[Dims], float]
    output_names: Sequence[str]
    gpu_dtype: torch.dtype
    cpu_dtype: torch.dtype
    baselines: Sequence[Baseline] = ()
    # Shapes the correctness check covers besides the requested one (small, odd sizes).
    check_shapes: Sequence[str] = ("small",)
    # Per-output tolerance override (e.g. a final state kept in float32).
    output_tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    # Per-output dtype an entry() must return, as a torch dtype name; an output not named here is in the
    # inputs' dtype (gpu_dtype on a GPU, cpu_dtype on the CPU). A state kept in float32 is named here.
    output_dtypes: Mapping[str, str] = field(default_factory=dict)
    # Timed reps regenerate their inputs in place, in the buffers a graph captured (tools.judge), from the judge's
    # seed and the digest of the rep before (kernels.draws.ChainedDraws): make_inputs' distribution, drawn from
    # the Draws given. A recipe of a few in-place draws keeps that cheap on the host, so that a short kernel's
    # reps stay bound by the GPU (the bracket needs it).
    refill_inputs: Callable[[list[Any], Dims, Draws], None] | None = None

    def __post_init__(self) -> None:
        for required in ("bench", "small"):
            if required not in self.shapes:
                raise ValueError(f"problem {self.name!r} lacks the required shape {required!r}")
        for name in self.check_shapes:
            if name not in self.shapes:
                raise ValueError(f"problem {self.name!r}: check shape {name!r} is not defined")
        if self.refill_inputs is None:
            raise ValueError(f"problem {self.name!r} has no refill_inputs: timed reps could not chain their inputs")

    def dims(self, shape: str) -> Dims:
        """The dimensions of a named shape, with an error that lists the valid names."""
        try:
            return self.shapes[shape]
        except KeyError:
            valid = ", ".join(self.shapes)
            raise KeyError(f"problem {self.name!r} has no shape {shape!r} (valid: {valid})") from None

    def default_dtype(self, device: str) -> torch.dtype:
        return self.gpu_dtype if device.startswith("cuda") else self.cpu_dtype

    def refill(self, buffers: list[Any], shape: str, seed: int, key: torch.Tensor | None = None) -> None:
        """Overwrite `buffers` (inputs of this shape) with the values of a timed rep, drawn from `seed` and `key`
        (the digest rows of the previous rep's outputs, on the buffers' device; None for a batch's first rep)."""
        device = next(b.device for b in buffers if isinstance(b, torch.Tensor))
        assert self.refill_inputs is not None  # __post_init__
        self.refill_inputs(buffers, self.dims(shape), ChainedDraws(seed, key, device))

    def inputs(self, shape: str, seed: int, device: str, dtype: torch.dtype | None = None) -> Inputs:
        return self.make_inputs(self.dims(shape), seed, device, dtype or self.default_dtype(device))

    def dtype_for(self, output_name: str, device: str) -> str:
        """The dtype (a torch dtype name) `entry()` must return for this output on this device."""
        name = self.output_dtypes.get(output_name)
        return name or str(self.default_dtype(device)).removeprefix("torch.")

    def tolerance_for(self, output_name: str) -> Tolerance:
        return self.output_tolerances.get(output_name, self.tolerance)

    def baseline(self, name: str) -> Baseline:
        for b in self.baselines:
            if b.name == name:
                return b
        valid = ", ".join(b.name for b in self.baselines)
        raise KeyError(f"problem {self.name!r} has no baseline {name!r} (valid: {valid})")

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (CLI `problems --json`, MCP resources)."""
        return {
            "name": self.name,
            "summary": self.summary,
            "shapes": {k: dict(v) for k, v in self.shapes.items()},
            "check_shapes": list(self.check_shapes),
            "outputs": list(self.output_names),
            "gpu_dtype": str(self.gpu_dtype).removeprefix("torch."),
            "cpu_dtype": str(self.cpu_dtype).removeprefix("torch."),
            "tolerance": {
                "rel_err": self.tolerance.rel_err,
                "atol": self.tolerance.atol,
                "rtol": self.tolerance.rtol,
            },
            "baselines": [{"name": b.name, "description": b.description} for b in self.baselines],
            "flops": {k: self.flops(v) for k, v in self.shapes.items()},
            "bytes": {k: self.bytes(v) for k, v in self.shapes.items()},
        }


def as_outputs(value: Any) -> Outputs:
    """Normalise what `entry()` or a reference returns into a tuple of tensors."""
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(value)
    raise TypeError(
        f"expected a tensor or a tuple of tensors, got {type(value).__name__}"
        + (f" of {[type(v).__name__ for v in value]}" if isinstance(value, (tuple, list)) else "")
    )


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> dict[str, Any]:
    """Relative-norm error, worst elementwise violation, and the verdict, in float64."""
    if tuple(out.shape) != tuple(ref.shape):
        return {
            "ok": False,
            "reason": f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}",
            "rel_err": math.inf,
            "max_abs_err": math.inf,
        }
    # float64 on the output's own device: copying a bench-size output to the host costs seconds.
    o = out.detach().to(dtype=torch.float64)
    r = ref.detach().to(device=o.device, dtype=torch.float64)
    finite = bool(torch.isfinite(o).all())
    if not finite:
        n_bad = int((~torch.isfinite(o)).sum())
        return {"ok": False, "reason": f"{n_bad} non-finite values", "rel_err": math.inf,
                "max_abs_err": math.inf}
    diff = (o - r).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    ref_norm = float(r.norm())
    rel = float((o - r).norm()) / ref_norm if ref_norm > 0 else max_abs
    excess = diff - (tol.atol + tol.rtol * r.abs())
    n_violations = int((excess > 0).sum())
    ok = rel <= tol.rel_err and n_violations == 0
    reason = ""
    if rel > tol.rel_err:
        reason = f"relative error {rel:.3e} > {tol.rel_err:.1e}"
    elif n_violations:
        reason = (f"{n_violations} of {o.numel()} elements outside atol={tol.atol:g}, "
                  f"rtol={tol.rtol:g}")
    return {"ok": ok, "reason": reason, "rel_err": rel, "max_abs_err": max_abs}
