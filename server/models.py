"""The structured results of the MCP tools: their output schemas, published in tools/list.

Every field a tool reports is declared, so a client can read what it gets from the schema: the key
ones an agent reasons with typed closely (ok, correct, error_class, max_rel_err, timing.median_us,
speedup, kernels[].registers, ...), the rich sections (trials, telemetry, the ncu run) as objects.
A field a tool reports only in some cases is declared with `reported()`: absent from the result
unless the tool reported a value, exactly as before it was declared. The schemas are closed
(additionalProperties false): a result holds nothing its schema does not name. `published` builds a
result from a report; a field the report has and the schema lacks is a bug of ours, refused under the
tests (MARATHON_STRICT_RESULTS=1) and, in service, dropped with a warning in the server log rather than
failing the call. tests/snapshots/tool_schemas.json pins the schemas, so a change to them is deliberate.

JSON has no NaN or infinity, so `jsonable` turns non-finite floats into None before validation (an
infinite error reads as "no number"; the error text says why).
"""

from __future__ import annotations

import logging
import math
import os
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Open(BaseModel):
    """A result object: the fields its schema declares, and no others."""

    model_config = ConfigDict(extra="forbid")


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


def published(model_type: type[BaseModel], report: Any) -> BaseModel:
    """The result a client gets for `report`: JSON-safe (`jsonable`), holding only declared fields."""
    dropped: list[str] = []
    value = _declared(model_type, jsonable(report), "", dropped)
    if dropped:
        if os.environ.get("MARATHON_STRICT_RESULTS") == "1":
            raise UndeclaredFields(f"{model_type.__name__} does not declare {', '.join(sorted(set(dropped)))}")
        new = sorted(set(dropped) - _warned)
        if new:
            _warned.update(new)
            logging.getLogger("marathon.server").warning("result %s: undeclared fields dropped: %s",
                                                         model_type.__name__, ", ".join(new))
    return model_type.model_validate(value)


def _is_none(value: Any) -> bool:
    return value is None


def reported(description: str) -> Any:
    """An optional field that only some results carry: None by default and then left out of the result, so a
    result without it reads as it did before the field was declared."""
    return Field(None, exclude_if=_is_none, description=description)


# Keys that carry our own tracebacks: kept in the log and the CLI's --json, never sent to an MCP client.
PRIVATE_KEYS = frozenset({"internal"})


def jsonable(value: Any) -> Any:
    """A copy of `value` fit for a client: non-finite floats become None (JSON cannot carry them) and
    private keys (tracebacks of our internals) are dropped."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items() if k not in PRIVATE_KEYS}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


# -- problems ----------------------------------------------------------------------------------------

class ToleranceInfo(Open):
    rel_err: float = Field(description="largest relative Frobenius error ||out - ref|| / ||ref|| that passes")
    atol: float
    rtol: float


class BaselineInfo(Open):
    name: str
    description: str = ""


class ProblemInfo(Open):
    name: str
    summary: str
    shapes: dict[str, dict[str, int]] = Field(description="shape name -> dimensions; 'bench' is timed")
    check_shapes: list[str] = Field(default_factory=list, description="small shapes every check also covers")
    tolerance: ToleranceInfo
    baselines: list[BaselineInfo] = Field(default_factory=list)
    outputs: list[str] | None = Field(None, description="the names of entry()'s outputs, in order")
    gpu_dtype: str | None = Field(None, description="the inputs' dtype on a GPU, e.g. 'bfloat16'")
    cpu_dtype: str | None = Field(None, description="the inputs' dtype under the CPU interpreter")
    flops: dict[str, float] | None = Field(None, description="shape name -> the cost model's floating-point "
                                                             "operations per call (TFLOP/s is reckoned from it)")
    bytes: dict[str, float] | None = Field(None, description="shape name -> the cost model's DRAM bytes per call "
                                                             "(GB/s and the physical floor are reckoned from it)")


class ProblemList(Open):
    problems: list[ProblemInfo]


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


class CompileResult(Open):
    problem: str
    shape: str
    ok: bool
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


class HotspotsResult(Open):
    problem: str
    shape: str
    ok: bool
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
    mode: str | None = reported(MODE_DESCRIPTION)
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


class ProfileResult(Open):
    problem: str
    shape: str
    ok: bool
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
    description: str | None = None
    available: bool | None = None
    reason: str | None = None
    correct: bool | None = None
    max_rel_err: float | None = None
    timing: dict[str, dict[str, Any]] | None = Field(None, description="mode ('eager', 'cuda_graph') -> timing")


class BaselineResult(Open):
    problem: str
    shape: str
    ok: bool
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


# -- the event log -----------------------------------------------------------------------------------

class AttemptSummary(Open):
    id: int
    ts: float
    run_id: str | None = None
    problem: str
    shape: str
    tool: str
    outcome: str
    error_class: str | None = None
    error: str | None = None
    max_rel_err: float | None = None
    median_us: float | None = None
    spread_pct: float | None = None
    speedup: float | None = None
    source_sha: str | None = None
    device: str | None = None
    error_line: int | None = Field(None, description="the candidate's line the error points at")
    timing_mode: str | None = Field(None, description="the timing's mode: " + MODE_DESCRIPTION)
    l2: str | None = Field(None, description=L2_DESCRIPTION)
    baseline: str | None = Field(None, description="the baseline it was timed against")
    baseline_us: float | None = Field(None, description="the baseline's median, us")
    intent_id: int | None = Field(None, description="the tool.intent event of the call that made it")
    verified: bool | None = Field(None, description="true only when the judge vouched for the whole verdict; only "
                                                    "verified attempts are best or meet a goal")
    verification: str | None = Field(None, description="how it was verified, e.g. 'judge:v1+bounds+census'")
    kernels: list[dict[str, Any]] | None = reported("for a compile: each kernel's registers, spills, shared memory, "
                                                    "warps, stages, wgmma/TMA use")


class NoteEntry(Open):
    id: int
    ts: float
    text: str
    problem: str | None = None
    shape: str | None = None
    tags: list[str] = Field(default_factory=list)
    run_id: str | None = None
    intent_id: int | None = reported("the tool.intent of the call that wrote it (notes written since the field "
                                     "existed)")


class AttemptPage(Open):
    attempts: list[AttemptSummary]
    offset: int
    limit: int
    next_offset: int | None = Field(None, description="offset of the next page; null on the last page")
    notes: list[NoteEntry] = Field(default_factory=list, description="newest notes for context")


class BestAttempt(AttemptSummary):
    source: str | None = None


class BestResult(Open):
    problem: str
    shape: str
    found: bool
    best: BestAttempt | None = None
    notes: list[NoteEntry] = Field(default_factory=list)


class AttemptDetail(AttemptSummary):
    source: str | None = None
    result: dict[str, Any] | None = Field(None, description="the full tool result (compile report or profile)")


class NoteResult(Open):
    id: int
    ts: float
