"""The structured results of the MCP tools: their output schemas, published in tools/list.

Every field a tool reports is declared, so a client can read what it gets from the schema: the key
ones an agent reasons with typed closely (ok, correct, error_class, max_rel_err, timing.median_us,
speedup, kernels[].registers, ...), the rich sections (trials, telemetry, the ncu run) as objects.
A field a tool reports only in some cases is declared with `reported()`: absent from the result
unless the tool reported a value, exactly as before it was declared. The schemas are closed
(additionalProperties false): a result holds nothing its schema does not name. The job tools' results are
the typed reports of tools.reports, built where the work is done; `published` makes the client's copy of one
and of the other results, built here from plain values. Either way a field the value has and the schema lacks is
a bug of ours, refused under the tests (MARATHON_STRICT_RESULTS=1) and, in service, dropped with a warning in the
server log rather than failing the call (tools.reports.declared_only).
tests/snapshots/tool_schemas.json pins the schemas, so a change to them is deliberate.

JSON has no NaN or infinity, so `jsonable` turns non-finite floats into None before validation (an
infinite error reads as "no number"; the error text says why).
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

from pydantic import BaseModel, Field

# The job tools' reports are built in tools/ (tools.reports); their names are this module's too, so that every
# result schema reads from here.
from tools.reports import (
    L2_DESCRIPTION,
    MODE_DESCRIPTION,
    Achieved,
    BaselineReport,
    BaselineResult,
    BaselineTiming,
    CompileMessage,
    CompileResult,
    HotspotLine,
    HotspotsResult,
    KernelHotspots,
    KernelReport,
    LineMix,
    Open,
    ProfileResult,
    Report,
    Timing,
    UndeclaredFields,
    declared_only,
    reported,
)

__all__ = ["L2_DESCRIPTION", "MODE_DESCRIPTION", "PRIVATE_KEYS", "Achieved", "BaselineReport", "BaselineResult",
           "BaselineTiming", "CompileMessage", "CompileResult", "HotspotLine", "HotspotsResult", "KernelHotspots",
           "KernelReport", "LineMix", "Open", "ProfileResult", "Report", "Timing", "UndeclaredFields", "jsonable",
           "published", "reported"]

M = TypeVar("M", bound=BaseModel)


def published(model_type: type[M], report: Any) -> M:
    """The result a client gets for `report` (a job's typed report, or a plain value): JSON-safe (`jsonable`),
    holding only declared fields."""
    if isinstance(report, BaseModel):
        report = report.model_dump(by_alias=True, exclude_unset=True)
    value = declared_only(model_type, jsonable(report))
    return model_type.model_validate(value)


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
