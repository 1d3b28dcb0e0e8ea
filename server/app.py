"""The MCP server: tools, resources and a prompt over server.service.Service.

Every tool goes through the Service, as the CLI does, so a call gives the same result and the same
log entries whichever way it came in; the caller's client name and session go into the log with it.

Results: structured content validated against the output models (server.models) plus a short text
summary (server.summaries). Errors the agent can act on (compile error, wrong result, refused import,
timeout, unknown problem or shape) come back as tool errors (isError) carrying the reason and the
details; internal faults are logged with a traceback (stderr and state_dir()/logs/server.log) and
reported as an incident id only. Arguments are strict and bounded (server.args): a wrong type or an
out-of-range integer is refused by the SDK's argument check as a tool error, before the service logs anything.

Annotations, decided per tool:
- list_problems, attempts, best, attempt: read-only (they only query).
- compile, profile, baseline: NOT read-only, because each appends to the event log (an attempt, a
  measured baseline) that `attempts` and `best` then return, so a client that skips confirmation
  for read-only tools should know these leave a trace. Not destructive (the log is append-only;
  nothing is overwritten or deleted). Idempotent: repeating a call with the same arguments
  changes nothing further that matters (the same verdict, the same best-so-far; compile and
  baseline answer from their caches), so a client may retry one after a dropped connection.
- note: not read-only, not destructive, not idempotent (each call adds another note).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, GetPromptResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, StrictBool, StrictFloat, StrictInt

from server import models, summaries
from server.args import SQLITE_MAX_INT, WHOLE
from server.request_plumbing import Caller, Progress, caller_of, new_process_session, run_blocking
from server.service import Service, UnknownInput
from tools.timing import L2_REGIMES

log = logging.getLogger("marathon.server")

SERVER_NAME = "kernel-marathon"
DEFAULT_HEARTBEAT_S = float(os.environ.get("MARATHON_HEARTBEAT_S", "5"))
# error_class values that mean the server, not the candidate, failed.
INTERNAL_CLASSES = frozenset({"worker_error", "internal_error"})
R = TypeVar("R", bound=models.Report)
OUTCOME = Literal["correct", "incorrect", "compile_error", "rejected", "timeout", "crashed", "error", "compiled"]

INSTRUCTIONS = """\
kernel-marathon: write fast Triton kernels for Hopper GPUs, checked against a reference and timed
against a baseline. The loop: list_problems; read problem://{name}/description and
problem://{name}/starter; compile(problem, source) to see registers, spills and wgmma use; profile(problem,
source) to check correctness on fresh inputs and time it; hotspots(problem, source) to see which source
lines the kernels stall on (GPU with Nsight Compute); note(...) what you learned; attempts(...) and
best(...) to see what was tried. A candidate is one Python file defining entry(*inputs) that launches
@triton.jit kernels; no kernel libraries and no torch compute (allocation and views are fine)."""

ProblemArg = Annotated[str, Field(description="problem name (see list_problems), e.g. 'softmax'")]
ShapeArg = Annotated[str | None, Field(description="shape name; default 'bench' (the timed one)")]
SourceArg = Annotated[str, Field(description="the whole candidate file: Python defining entry(*inputs), "
                                             "which launches @triton.jit kernels and returns the output(s)")]
# The schema lists the regimes; the value is checked by the service (Service.check_l2), the one place every
# surface shares, so a bad one gets the CLI's answer here too.
L2Arg = Annotated[str, Field(description="L2 state before each timed rep, the baseline's too: 'cold' (default) "
                                         "flushes it (512 MB read); 'warm' does not, so the inputs are in L2 as "
                                         "their refill left them. Warm timings are not verified and never become "
                                         "a best", json_schema_extra={"enum": list(L2_REGIMES)})]

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)
RUNS_JOB = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                           open_world_hint=False)
APPENDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                          open_world_hint=False)


def _details(report: dict[str, Any]) -> dict[str, Any]:
    """The parts of a failed result worth putting in the error text (no device or telemetry noise)."""
    out = {k: v for k, v in report.items() if k not in ("device", "telemetry", "ceilings", "trials", "kernels")}
    failing = [t for t in report.get("trials") or [] if not t.get("ok")]
    if failing:
        out["failing_trials"] = failing[:3]
    return models.jsonable(out)


def _ok(summary: str, model: BaseModel) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=summary)],
                          structured_content=model.model_dump(mode="json", by_alias=True))


def _failed(summary: str, model: BaseModel, report: dict[str, Any]) -> CallToolResult:
    body = f"{summary}\ndetails: {json.dumps(_details(report), default=str)}"
    return CallToolResult(content=[TextContent(type="text", text=body)],
                          structured_content=model.model_dump(mode="json", by_alias=True), is_error=True)


def _job_reply(fields: dict[str, Any], model_type: type[models.Report], summary: str, ok: bool) -> CallToolResult:
    """A job tool's answer: the text summary and the typed report (`fields`, its `as_dict()`), published; an
    error result unless `ok`."""
    model = models.published(model_type, fields)
    return _ok(summary, model) if ok else _failed(summary, model, fields)


@contextlib.contextmanager
def _faults(tool: str) -> Iterator[None]:
    """Caller mistakes become tool errors with the reason; anything else is an internal fault."""
    try:
        yield
    except UnknownInput as exc:
        raise ToolError(str(exc.args[0] if exc.args else exc)) from None
    except ToolError:
        raise
    except Exception:
        incident = uuid.uuid4().hex[:8]
        log.exception("internal error in tool %s (incident %s)", tool, incident)
        raise ToolError(f"internal error in {tool} (incident {incident}); the server log has the details; "
                        "the call may be retried") from None


def _internal(tool: str, report: dict[str, Any]) -> None:
    if report.get("error_class") in INTERNAL_CLASSES:
        incident = uuid.uuid4().hex[:8]
        log.error("tool %s: %s (incident %s): %s", tool, report.get("error_class"), incident, report.get("error"))
        raise ToolError(f"internal error in {tool} (incident {incident}): the job could not run; "
                        "the server log has the details; the call may be retried")


class MarathonServer(MCPServer[Any]):
    """MCPServer, with a prompt request checked before it is rendered (server.prompts.check_prompt_request), so
    that a caller's mistake there is answered as invalid params instead of an internal error."""

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None,
                         context: Context[Any, Any] | None = None) -> GetPromptResult | InputRequiredResult:
        from server.prompts import check_prompt_request

        check_prompt_request(await self.list_prompts(), name, arguments)
        return await super().get_prompt(name, arguments, context)


def build_app(service: Service, *, heartbeat_s: float | None = None, process_session: str | None = None,
              run_id: str | None = None, **server_kwargs: Any) -> MCPServer:
    """An MCPServer whose tools run on `service` (the caller keeps ownership and closes it).

    heartbeat_s: the longest silence between progress notifications of a long call.
    process_session: the session recorded for stdio/in-memory callers (one connection a process).
    run_id: the run recorded for calls that do not name one in `_meta` (default $MARATHON_RUN_ID).
    server_kwargs: passed to MCPServer (token_verifier and auth for HTTP).
    """
    beat = heartbeat_s or DEFAULT_HEARTBEAT_S
    session_id = process_session or new_process_session("mcp")
    default_run = run_id or os.environ.get("MARATHON_RUN_ID") or None
    app: MCPServer = MarathonServer(SERVER_NAME, title="kernel-marathon", instructions=INSTRUCTIONS,
                                    version=_version(), **server_kwargs)

    def who(ctx: Context) -> Caller:
        return caller_of(ctx, session_id, default_run)

    async def quick(tool: str, args: dict[str, Any], ctx: Context, fn: Callable[..., Any],
                    summary: Callable[[Any], Any], pass_intent: bool = False) -> Any:
        c = who(ctx)
        return await anyio.to_thread.run_sync(lambda: service.record(
            tool, args, fn, run_id=c.run_id, client=c.client(), call_id=c.call_id, summary=summary,
            pass_intent=pass_intent))

    async def job(ctx: Context, tool: str, call: Callable[[Caller, Progress, threading.Event], R],
                  model: type[R], summary: Callable[[dict[str, Any]], str], *, stoppable: bool = True,
                  succeeded: Callable[[R], bool] = lambda r: r.ok) -> CallToolResult:
        """What every job tool does around its service call: the caller's run and call ids, the call in a thread
        with progress notifications and cancellation (a job that cannot be stopped once started finishes, and is
        logged, on its own), a fault of the harness as a retryable internal error, and the reply: the summary and
        the typed report."""
        with _faults(tool):
            c = who(ctx)
            report = await run_blocking(ctx, tool, lambda progress, cancel: call(c, progress, cancel), beat,
                                        **({} if stoppable else {"cancel_grace_s": 0}))
            fields = report.as_dict()
            _internal(tool, fields)
            return _job_reply(fields, model, summary(fields), succeeded(report))

    async def notes_for(problem: str | None, shape: str | None) -> list[dict[str, Any]]:
        notes = await anyio.to_thread.run_sync(lambda: service.notes(problem=problem, limit=20))
        return [n for n in notes if shape is None or n.get("shape") in (None, shape)][:10]

    # -- problems -------------------------------------------------------------------------------------

    @app.tool(title="List problems", annotations=READ_ONLY)
    async def list_problems(ctx: Context) -> Annotated[CallToolResult, models.ProblemList]:
        """The problem suite: each problem's shapes (dimensions), correctness tolerance and baselines.

        Read problem://{name}/description for the exact contract and problem://{name}/starter for a
        correct kernel to start from."""
        with _faults("list_problems"):
            problems = await quick("list_problems", {}, ctx, service.problems,
                                   lambda ps: {"problems": [p["name"] for p in ps]})
            out = models.published(models.ProblemList, {"problems": problems})
            return _ok(summaries.problems_text(problems), out)

    # -- compile / profile / baseline -------------------------------------------------------------------

    @app.tool(title="Compile a candidate for Hopper", annotations=RUNS_JOB)
    async def compile(
        problem: ProblemArg, source: SourceArg, ctx: Context, shape: ShapeArg = None,
        asm: Annotated[StrictBool, Field(description="include PTX and SASS of every kernel (long)")] = False,
        lines: Annotated[StrictBool, Field(description="per kernel, its instructions by source line and kind "
                                                       "(shared memory, barriers, shuffles, MMAs, global, spills): "
                                                       "where layout conversions and cross-warp reductions are")
                         ] = False,
    ) -> Annotated[CallToolResult, models.CompileResult]:
        """Compile every kernel the candidate launches at `shape` for sm_90 (Hopper), without running it.

        Reports per kernel: registers, spilled bytes, shared memory, warps, stages, and whether the
        SASS uses wgmma (HGMMA) and TMA. Cheap compared with profile: use it to catch syntax, type and
        resource problems first. A failure comes back as a tool error with the message and line."""
        # The compile steps cannot be interrupted: a cancelled compile finishes (and is logged) on its own.
        return await job(ctx, "compile", lambda c, progress, cancel: service.compile(
            problem, source, shape, want_asm=asm, want_lines=lines, run_id=c.run_id, client=c.client(),
            call_id=c.call_id), models.CompileResult, summaries.compile_text, stoppable=False)

    @app.tool(title="Check and time a candidate", annotations=RUNS_JOB)
    async def profile(
        problem: ProblemArg, source: SourceArg, ctx: Context, shape: ShapeArg = None,
        graph: Annotated[StrictBool | None, Field(description="time CUDA-graph replays; default: when a call "
                                                               "takes under 200 us")] = None,
        baseline: Annotated[str | None, Field(description="baseline to time against; default the problem's "
                                                          "first available")] = None,
        timeout_s: Annotated[StrictFloat | None, Field(gt=0, le=3600, description="seconds before the job is "
                                                                                 "stopped (default 600)")] = None,
        ncu: Annotated[StrictBool, Field(description="also run the candidate under Nsight Compute (where ncu "
                                                     "exists): per-kernel time, DRAM and SM throughput")] = False,
        l2: L2Arg = "cold",
    ) -> Annotated[CallToolResult, models.ProfileResult]:
        """Check the candidate against the reference on fresh random inputs (several trials, the given
        shape and small odd shapes), then time it interleaved with the baseline on the GPU.

        Returns max_rel_err, timing (median us, IQR spread), speedup over the baseline, achieved
        GB/s and TFLOP/s and the GPU's clocks. A candidate that is wrong, refused (kernel library or
        torch compute), fails to load, crashes or hangs comes back as a tool error with the details.
        Long: sends progress notifications while it runs; cancelling the call stops the job."""
        return await job(ctx, "profile", lambda c, progress, cancel: service.profile(
            problem, source, shape, run_id=c.run_id, client=c.client(), call_id=c.call_id, progress=progress,
            cancel=cancel, graph=graph, baseline=baseline, timeout=timeout_s, ncu=ncu, l2=l2),
            models.ProfileResult, summaries.profile_text, succeeded=lambda r: bool(r.ok and r.correct))

    @app.tool(title="Time the baselines", annotations=RUNS_JOB)
    async def baseline(
        problem: ProblemArg, ctx: Context, shape: ShapeArg = None,
        refresh: Annotated[StrictBool, Field(description="measure again even if the log has this baseline")] = False,
    ) -> Annotated[CallToolResult, models.BaselineResult]:
        """Time each of the problem's baselines (eager and as a CUDA graph) at `shape`, after checking
        it against the reference. Measured once per GPU, driver and library versions, then answered
        from the event log (cached=true) unless refresh is set."""
        return await job(ctx, "baseline", lambda c, progress, cancel: service.baseline(
            problem, shape, refresh=refresh, run_id=c.run_id, client=c.client(), call_id=c.call_id,
            progress=progress, cancel=cancel), models.BaselineResult, summaries.baseline_text)

    @app.tool(title="Where a candidate's kernels stall, by source line", annotations=RUNS_JOB)
    async def hotspots(
        problem: ProblemArg, source: SourceArg, ctx: Context, shape: ShapeArg = None,
        top: Annotated[StrictInt, Field(ge=1, le=100, description="source lines to list per kernel"), WHOLE] = 15,
    ) -> Annotated[CallToolResult, models.HotspotsResult]:
        """Run one call of the candidate under Nsight Compute with warp-state sampling and list, per
        kernel, the source lines where its warps stall most, with the reasons (long_sb: waiting on
        global memory; barrier, mio: shared memory and layout conversions; wait: fixed latencies).

        Lines inside Triton's own code (a tl.sum, a tl.cumsum) are named by their Triton function. Needs a
        GPU and ncu; does not check or time the candidate (use profile for that). Takes about a minute."""
        # ncu runs to completion once started: a cancelled call finishes (and is logged) on its own.
        return await job(ctx, "hotspots", lambda c, progress, cancel: service.hotspots(
            problem, source, shape, top=top, run_id=c.run_id, client=c.client(), call_id=c.call_id,
            progress=progress), models.HotspotsResult, summaries.hotspots_text, stoppable=False)

    # -- the event log ----------------------------------------------------------------------------------

    @app.tool(title="List attempts", annotations=READ_ONLY)
    async def attempts(
        ctx: Context, problem: Annotated[str | None, Field(description="only this problem")] = None,
        shape: Annotated[str | None, Field(description="only this shape (needs problem)")] = None,
        outcome: Annotated[OUTCOME | None, Field(description="only this outcome")] = None,
        limit: Annotated[StrictInt, Field(ge=1, le=200, description="page size"), WHOLE] = 20,
        offset: Annotated[StrictInt, Field(ge=0, le=SQLITE_MAX_INT, description="attempts to skip (newest first)"),
                          WHOLE] = 0,
    ) -> Annotated[CallToolResult, models.AttemptPage]:
        """Attempts from the event log, newest first: tool, outcome, error class and message, max
        relative error, median time, speedup. Paged with limit/offset; the newest notes for the
        problem come along as context. Read one attempt whole (source, full result) with `attempt`."""
        with _faults("attempts"):
            if shape is not None and problem is None:
                raise ToolError("shape needs problem")
            args = {"problem": problem, "shape": shape, "outcome": outcome, "limit": limit, "offset": offset}

            def query() -> list[dict[str, Any]]:
                if problem is not None:
                    service.resolve(problem, shape)
                return service.attempts(problem=problem, shape=shape, outcome=outcome, limit=limit + 1,
                                        offset=offset)

            rows = await quick("attempts", args, ctx, query, lambda rs: {"ids": [r["id"] for r in rs[:limit]]})
            page = {"attempts": rows[:limit], "offset": offset, "limit": limit,
                    "next_offset": offset + limit if len(rows) > limit else None,
                    "notes": await notes_for(problem, shape)}
            page = models.jsonable(page)
            return _ok(summaries.attempts_text(page), models.published(models.AttemptPage, page))

    @app.tool(title="Best attempt", annotations=READ_ONLY)
    async def best(problem: ProblemArg, ctx: Context, shape: ShapeArg = None
                   ) -> Annotated[CallToolResult, models.BestResult]:
        """The best correct attempt for a problem and shape (fastest timed one; else the newest
        correct), with its source and numbers, and the newest notes as context. found=false when
        nothing correct has been logged yet."""
        with _faults("best"):
            resolved = shape or "bench"
            found = await quick("best", {"problem": problem, "shape": resolved}, ctx,
                                lambda: service.best(problem, shape),
                                lambda b: {"attempt_id": b["id"] if b else None})
            out = models.jsonable({"problem": problem, "shape": resolved, "found": found is not None, "best": found,
                                   "notes": await notes_for(problem, resolved)})
            return _ok(summaries.best_text(out), models.published(models.BestResult, out))

    @app.tool(title="Read one attempt", annotations=READ_ONLY)
    async def attempt(id: Annotated[StrictInt, Field(ge=1, le=SQLITE_MAX_INT, description="attempt id (from attempts, "
                                                     "best, or a compile/profile result)"), WHOLE],
                      ctx: Context) -> Annotated[CallToolResult, models.AttemptDetail]:
        """One attempt whole: the numbers, the candidate source, and the full tool result (the compile
        report or the profile result with every trial)."""
        with _faults("attempt"):
            found = await quick("attempt", {"id": id}, ctx, lambda: service.attempt(id),
                                lambda a: {"attempt_id": a["id"]})
            found = models.jsonable(found)
            return _ok(summaries.attempt_text(found), models.published(models.AttemptDetail, found))

    @app.tool(title="Record a note", annotations=APPENDS)
    async def note(
        text: Annotated[str, Field(min_length=1, max_length=20000,
                                    description="what to remember: a strategy, a hypothesis, what the "
                                                "profiler showed, why something failed")],
        ctx: Context, problem: Annotated[str | None, Field(description="the problem it is about")] = None,
        shape: Annotated[str | None, Field(description="the shape it is about")] = None,
        tags: Annotated[list[str] | None, Field(description="short labels, e.g. ['hypothesis']")] = None,
    ) -> Annotated[CallToolResult, models.NoteResult]:
        """Record a note in the event log. Notes come back with attempts and best, so what was learned
        survives context compaction and restarts."""
        with _faults("note"):
            if shape is not None and problem is None:
                raise ToolError("shape needs problem")
            c = who(ctx)
            args = {"text": text, "problem": problem, "shape": shape, "tags": tags}
            made = await quick("note", args, ctx, lambda intent_id: service.note(
                text, problem=problem, shape=shape, tags=tags, run_id=c.run_id, intent_id=intent_id),
                lambda n: {"note_id": n["id"]}, pass_intent=True)
            return _ok(f"noted (#{made['id']})", models.published(models.NoteResult, made))

    from server.prompts import register_prompts
    from server.resources import register_resources

    register_resources(app, service)
    register_prompts(app, service)
    return app


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("kernel-marathon")
    except Exception:
        return "0.1.0"
