"""The typed reports of the job tools (compile, profile, baseline, hotspots), built where the work is done.

The compiler, the judge, the baseline job and the hotspots op build these; the service updates them and every
surface (MCP, the CLI's --json) publishes them as they are, so one declaration is both the report's type here and
the result schema tools/list publishes (server.models re-exports them). The models are closed (extra fields are
refused): a report that crossed a pipe is read back with `received`, which is the schema check on what came back.

A field a report carries only in some cases is declared with `reported()`: absent from the published result
unless set. `internal` holds a traceback of our own: kept in the log and the CLI's --json, never in the schema
nor sent to an MCP client (server.models.jsonable drops it).
"""

from __future__ import annotations

import logging
import os
import typing
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import SkipJsonSchema


class Open(BaseModel):
    """A result object: the fields its schema declares, and no others."""

    model_config = ConfigDict(extra="forbid")


def _is_none(value: Any) -> bool:
    return value is None


def reported(description: str) -> Any:
    """An optional field that only some results carry: None by default and then left out of the result, so a
    result without it reads as it did before the field was declared."""
    return Field(None, exclude_if=_is_none, description=description)


def private() -> Any:
    """Our own traceback: out of the schema, and out of every dump while unset."""
    return Field(None, exclude_if=_is_none, description="a traceback of our own (never sent to a client)")


class Report(Open):
    """A job's report. `as_dict` is the report as a plain value: exactly the fields that were set, so the log
    and the text summaries see what the work reported, not every default the schema fills in."""

    problem: str
    shape: str
    ok: bool
    internal: SkipJsonSchema[str | None] = private()

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_unset=True)


R = TypeVar("R", bound=Report)


class UndeclaredFields(ValueError):
    """A report holds fields its result schema does not declare."""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The result models an annotation names (Timing | None, list[CompileMessage] | None, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _declared(model_type: type[BaseModel], value: Any, path: str, dropped: list[str]) -> Any:
    """`value` with only the fields `model_type` declares, recursively into nested result models."""
    if not isinstance(value, dict):
        return value
    fields = {(f.alias or name): f for name, f in model_type.model_fields.items()}
    out = {}
    for key, item in value.items():
        field = fields.get(key)
        if field is None:
            dropped.append(f"{path}{key}")
            continue
        nested = _models_in(field.annotation)
        if nested and isinstance(item, dict):
            item = _declared(nested[0], item, f"{path}{key}.", dropped)
        elif nested and isinstance(item, list):
            item = [_declared(nested[0], x, f"{path}{key}[].", dropped) for x in item]
        out[key] = item
    return out


_warned: set[str] = set()


def declared_only(model_type: type[BaseModel], value: Any) -> Any:
    """`value` less the fields `model_type` does not declare. An undeclared field is a bug of ours: refused under
    the tests (MARATHON_STRICT_RESULTS=1, raising UndeclaredFields) and, in service, dropped with a warning in the
    server log, once a field, rather than failing a call whose verdict is sound."""
    dropped: list[str] = []
    value = _declared(model_type, value, "", dropped)
    if dropped:
        if os.environ.get("MARATHON_STRICT_RESULTS") == "1":
            raise UndeclaredFields(f"{model_type.__name__} does not declare {', '.join(sorted(set(dropped)))}")
        new = sorted(set(dropped) - _warned)
        if new:
            _warned.update(new)
            logging.getLogger("marathon.reports").warning("report %s: undeclared fields dropped: %s",
                                                          model_type.__name__, ", ".join(new))
    return value


M = TypeVar("M", bound=BaseModel)


def built(model: type[M], fields: dict[str, Any]) -> M:
    """The typed report of the fields the work produced, where it produced them (the judge, the compiler, the
    baseline job, the hotspots op); undeclared fields are `declared_only`'s to handle."""
    return model.model_validate(declared_only(model, fields))


def received(model: type[R], answer: dict[str, Any], **known: Any) -> R:
    """`answer` (a worker's profile, baseline or hotspots report, as JSON came back over the pipe) as `model`,
    `known` filling what it lacks (a pool fault names no problem). One that does not fit the schema is a fault of
    ours, reported as an internal error."""
    try:
        return built(model, {**known, **answer})
    except (ValidationError, UndeclaredFields) as exc:
        return model.model_validate({**known, "ok": False, "error_class": "internal_error",
                                     "error": f"the report does not fit {model.__name__}: {exc}"[:2000]})


# -- compile -----------------------------------------------------------------------------------------

class LineMix(Open):
    instructions: int = Field(description="SASS instructions from this source line")
    line: int | None = Field(None, description="the candidate's line; None for Triton's own code")
    library: str | None = Field(None, description="file:line inside Triton, for a library line")
    function: str | None = Field(None, description="the Triton function of a library line, e.g. 'cumsum'")
    text: str = ""
    shared: int = Field(0, description="shared-memory loads and stores (layout conversions, reductions, operands)")
    barriers: int = 0
    shuffles: int = 0
    mma: int = Field(0, description="tensor-core MMA instructions")
    global_ops: int = Field(0, alias="global", description="global loads, stores and copies")
    local: int = Field(0, description="spill loads and stores")
    mufu: int = Field(0, description="special-function instructions (exp2, rsqrt, ...)")


class KernelReport(Open):
    name: str
    registers: int | None = Field(None, description="registers per thread")
    spill_bytes: int | None = Field(None, description="local memory per thread (register spills)")
    shared_bytes: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    uses_wgmma: bool | None = Field(None, description="the SASS has HGMMA (Hopper tensor-core MMA)")
    uses_tma: bool | None = None
    lines: list[LineMix] | None = Field(None, exclude_if=lambda v: v is None,  # absent unless asked for
                                        description="with lines=true: the source lines with the most "
                                                    "instructions, by kind")
    signature: dict[str, Any] | None = Field(None, description="argument name -> Triton type, e.g. '*fp32', 'i32' "
                                                                "(constexprs apart)")
    constexprs: dict[str, Any] | None = Field(None, description="constexpr argument -> the value it was compiled with")
    grid: list[int] | None = Field(None, description="the launch grid at this shape")
    num_ctas: int | None = None
    stack_bytes: int | None = Field(None, description="stack frame per thread")
    spill_instructions: int | None = Field(None, description="local-memory loads and stores (STL/LDL) in the SASS")
    sass_instructions: int | None = Field(None, description="instructions in the SASS")
    ptx: str | None = reported("with asm=true: the PTX")
    sass: str | None = reported("with asm=true: the SASS (disassembled cubin)")
    ttgir: str | None = reported("with asm=true: Triton's GPU IR")


class CompileMessage(Open):
    message: str
    line: int | None = None
    kernel: str | None = reported("the kernel that failed to compile, where one did")


class CompileResult(Report):
    target: str | None = None
    error_class: str | None = None
    errors: list[CompileMessage] = Field(default_factory=list)
    kernels: list[KernelReport] = Field(default_factory=list)
    cached: bool | None = None
    attempt_id: int | None = Field(None, description="the attempt this call logged; read it with `attempt`")
    source_sha: str | None = Field(None, description="sha256 of the candidate source")
    triton: str | None = Field(None, description="the Triton version that compiled it")
    elapsed_s: float | None = Field(None, description="seconds this call took (small when cached)")


# -- hotspots ----------------------------------------------------------------------------------------

class HotspotLine(Open):
    share_pct: float = Field(description="this line's share of the kernel's warp-stall samples, percent")
    samples: int
    line: int | None = Field(None, description="the candidate's line; None for Triton's own code")
    library: str | None = Field(None, description="file:line inside Triton, for a library line")
    function: str | None = Field(None, description="the Triton function of a library line, e.g. 'sum'")
    text: str = ""
    stalls_pct: dict[str, float] = Field(default_factory=dict, description="the line's top stall reasons, "
                                                                           "percent of its samples")
    shared_wavefronts: int | None = Field(None, description="shared-memory wavefronts issued from this line")


class KernelHotspots(Open):
    kernel: str
    samples: int | None = None
    stalls_pct: dict[str, float] = Field(default_factory=dict)
    lines: list[HotspotLine] = Field(default_factory=list)
    error: str | None = None


class HotspotsResult(Report):
    error: str | None = None
    kernels: list[KernelHotspots] = Field(default_factory=list)
    error_class: str | None = reported("why it did not run, e.g. 'rejected' (the candidate breaks the rules)")
    errors: list[CompileMessage] | None = reported("with error_class 'rejected': each rule broken, with its line")
    output_tail: str | None = reported("the last of what a worker that died printed")
    worker_replaced: bool | None = reported("true when the job's worker was stopped and replaced")

# -- profile -----------------------------------------------------------------------------------------

L2_DESCRIPTION = "the L2 state before each rep: 'cold' (flushed) or 'warm' (not flushed)"


MODE_DESCRIPTION = ("'cuda_graph' (CUDA-graph replays), 'eager', or 'cpu_wall_clock' (the CPU interpreter timed by "
                    "the wall clock: never a kernel's speed)")


class Timing(Open):
    median_us: float
    spread_pct: float | None = Field(None, description="interquartile range as a share of the median")
    mode: str | None = Field(None, description=MODE_DESCRIPTION)
    reps: int | None = None
    l2: Literal["cold", "warm"] | None = Field(None, description=L2_DESCRIPTION)
    mean_us: float | None = None
    min_us: float | None = None
    p10_us: float | None = Field(None, description="10th percentile of the reps")
    p90_us: float | None = Field(None, description="90th percentile of the reps")
    pilot_us: float | None = Field(None, description="the untimed pilot run that sized the timed reps")


class BaselineTiming(Open):
    name: str | None = None
    median_us: float | None = None
    age_s: float | None = Field(None, description="seconds since this worker timed the baseline (re-used while "
                                                  "fresh; 0 when timed for this profile)")
    l2: Literal["cold", "warm"] | None = Field(None, description=L2_DESCRIPTION + ", as the candidate's")
    error: str | None = None
    spread_pct: float | None = reported("interquartile range as a share of the median")
    mode: str | None = reported(MODE_DESCRIPTION + "; a baseline is replayed as a CUDA graph whatever the "
                                                   "candidate's mode, unless it cannot be captured")
    note: str | None = reported("why the baseline was timed eagerly, or with the GPU slowed by heat, where it was")
    cooled_s: float | None = reported("seconds waited before the timing for the GPU to shed a slowdown by heat or "
                                      "a hardware slowdown (at most 30)")
    reps: int | None = reported("timed reps")
    mean_us: float | None = reported("mean of the reps")
    min_us: float | None = reported("fastest rep")
    p10_us: float | None = reported("10th percentile of the reps")
    p90_us: float | None = reported("90th percentile of the reps")
    pilot_us: float | None = reported("the untimed pilot run that sized the timed reps")


class Achieved(Open):
    gbps: float | None = Field(None, description="the cost model's DRAM bytes over the median, GB/s")
    tflops: float | None = Field(None, description="the cost model's FLOPs over the median, TFLOP/s")
    dram_share: float | None = Field(None, description="gbps over this GPU's measured copy bandwidth")
    bf16_share: float | None = Field(None, description="tflops over this GPU's measured bf16 matmul rate")
    floor_us: float | None = Field(None, description="the physical floor: no correct kernel can be faster")


class ProfileResult(Report):
    correct: bool | None = None
    error_class: str | None = None
    error: str | None = None
    error_line: int | None = None
    max_rel_err: float | None = Field(None, description="worst relative error over all correctness trials")
    timing: Timing | None = None
    baseline: BaselineTiming | None = None
    speedup: float | None = Field(None, description="baseline median / candidate median")
    timing_note: str | None = None
    attempt_id: int | None = None
    verified: bool | None = Field(None, description="true only when the judge vouches for the whole verdict: "
                                  "checked, timed within the outside bounds and, before a best, censused; "
                                  "only verified attempts are best or meet a goal")
    verification: dict[str, Any] | None = Field(None, description="how it was verified: by (judge:v1, +bounds, "
                                                "+census), checked calls and reps, the floor, the bracket, the census")
    source_sha: str | None = Field(None, description="sha256 of the candidate source")
    device: dict[str, Any] | None = Field(None, description="where it ran: kind ('cuda' or 'cpu'), name, torch, "
                                                            "triton, python, and the GPU's driver and clocks")
    candidate_exit: str | None = Field(None, description="how the candidate's process ended, or that it was kept "
                                                         "for a repeat profile of the same source")
    achieved: Achieved | None = reported("with a timing: GB/s, TFLOP/s, their shares of this GPU's ceilings and "
                                         "the physical floor")
    ceilings: dict[str, Any] | None = reported("with a GPU timing: this GPU's measured copy bandwidth (dram_gbps) "
                                               "and bf16 matmul rate (bf16_tflops)")
    telemetry: dict[str, Any] | None = reported("with a GPU timing: clocks, temperature, power and throttle reasons "
                                                "before and after")
    timing_loop: dict[str, Any] | None = reported("with a timing: the timed loop's wall time, reps and batches")
    trials: list[dict[str, Any]] | None = reported("each correctness trial: shape, seed, ok, max_rel_err, or its "
                                                   "error")
    shapes_checked: list[str] | None = reported("the shapes the correctness trials covered")
    phases: dict[str, float] | None = reported("seconds per phase of the job (spawn and load, checks, timing, ...)")
    notes: list[str] | None = reported("the judge's remarks on this run")
    sandbox: dict[str, Any] | None = reported("how the candidate's process was confined")
    candidate_process: str | None = reported("'fresh', or 'reused' (kept from a profile of the same source)")
    output_bytes: int | None = reported("bytes the candidate printed")
    output_tail: str | None = reported("the last of what the candidate (or a worker that died) printed")
    violations: list[CompileMessage] | None = reported("with error_class 'rejected' or 'syntax_error': each rule "
                                                       "broken, with its line")
    ncu: dict[str, Any] | None = reported("with ncu=true: Nsight Compute's per-kernel time and throughput, and "
                                          "profile_vs_ncu_pct (the median against ncu's kernel time)")
    worker_s: float | None = reported("seconds the job held its worker")
    worker_replaced: bool | None = reported("true when the job's worker was stopped and replaced (a hang, a "
                                            "crash, a cancel)")


# -- baseline ----------------------------------------------------------------------------------------

class BaselineReport(Open):
    name: str
    internal: SkipJsonSchema[str | None] = private()
    description: str | None = None
    available: bool | None = None
    reason: str | None = None
    correct: bool | None = None
    max_rel_err: float | None = None
    timing: dict[str, dict[str, Any]] | None = Field(None, description="mode ('eager', 'cuda_graph') -> timing")


class BaselineResult(Report):
    cached: bool | None = Field(None, description="true when the numbers come from the log, not a new run")
    baselines: list[BaselineReport] = Field(default_factory=list)
    timing_note: str | None = None
    cached_event_id: int | None = reported("with cached=true: the event the numbers were read from")
    device: dict[str, Any] | None = reported("where it ran: kind ('cuda' or 'cpu'), name, torch, triton, python, "
                                             "and the GPU's driver and clocks")
    ceilings: dict[str, Any] | None = reported("with a GPU timing: this GPU's measured copy bandwidth and bf16 "
                                               "matmul rate")
    telemetry: dict[str, Any] | None = reported("with a GPU timing: clocks, temperature, power and throttle reasons "
                                                "before and after")
    error_class: str | None = reported("why the job did not finish: 'timeout', 'cancelled', 'crashed'")
    error: str | None = reported("what went wrong, with error_class")
    output_tail: str | None = reported("the last of what a worker that died printed")
    worker_s: float | None = reported("seconds the job held its worker")
    worker_replaced: bool | None = reported("true when the job's worker was stopped and replaced")

