"""The structured results of the MCP tools: their output schemas, published in tools/list.

The key fields an agent reasons with are typed (ok, correct, error_class, max_rel_err,
timing.median_us, speedup, kernels[].registers, ...). Everything else a tool reports passes
through unchanged (extra="allow"): the reports are rich and grow, and a new field must not break
a client that validates against the schema. tests/snapshots/tool_schemas.json pins the schemas, so
a change to them is deliberate.

JSON has no NaN or infinity, so `jsonable` turns non-finite floats into None before validation (an
infinite error reads as "no number"; the error text says why).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Open(BaseModel):
    """A result object that keeps every field the tool reported, typed or not."""

    model_config = ConfigDict(extra="allow")


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


class CompileMessage(Open):
    message: str
    line: int | None = None


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

# -- profile -----------------------------------------------------------------------------------------

L2_DESCRIPTION = "the L2 state before each rep: 'cold' (flushed) or 'warm' (not flushed)"


class Timing(Open):
    median_us: float
    spread_pct: float | None = Field(None, description="interquartile range as a share of the median")
    mode: str | None = Field(None, description="'cuda_graph' (CUDA-graph replays) or 'eager'")
    reps: int | None = None
    l2: Literal["cold", "warm"] | None = Field(None, description=L2_DESCRIPTION)


class BaselineTiming(Open):
    name: str | None = None
    median_us: float | None = None
    age_s: float | None = Field(None, description="seconds since this worker timed the baseline (re-used while "
                                                  "fresh; 0 when timed for this profile)")
    l2: Literal["cold", "warm"] | None = Field(None, description=L2_DESCRIPTION + ", as the candidate's")
    error: str | None = None


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


class NoteEntry(Open):
    id: int
    ts: float
    text: str
    problem: str | None = None
    shape: str | None = None
    tags: list[str] = Field(default_factory=list)


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
