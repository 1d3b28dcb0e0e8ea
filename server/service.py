"""The operations behind every surface (MCP tools and CLI commands), each recorded in the event log.

One call = a `tool.intent` event committed before the work, the work itself (in tools/), then a
`tool.result` event and, for compile and profile, an `attempt` event that the views (attempts, best,
failures) are built from. The MCP server and the CLI both go through here, so the same call gives
the same result and the same log entries whichever way it came in.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kernels import get_problem, list_problems, solution_path, starter_path
from state import EventLog, intent_key, keys, state_dir
from state.events import outcome_for
from tools import guard
from tools.compiler import compile_candidate
from tools.pool import WorkerPool
from tools.reports import (
    BaselineResult,
    CompileMessage,
    CompileResult,
    HotspotsResult,
    ProfileResult,
    Timing,
    UndeclaredFields,
    built,
    received,
)
from tools.timing import L2_REGIMES

Progress = Callable[[dict[str, Any]], None]



MAX_SOURCE_BYTES = 1 << 20  # a kernel file; the largest in the suite is 60 KB
# Set to 1 in the server's environment, a GPU timing may be verified without a kernel census where ncu cannot run.
CENSUS_WAIVER = "MARATHON_CENSUS_OPTIONAL"


class UnknownInput(ValueError):
    """A request naming a problem, shape or attempt that does not exist: the caller's to fix."""


class Service:
    """compile / profile / baseline / log queries, logged. Thread-safe; one instance per process."""

    def __init__(self, log: EventLog | None = None, pool: WorkerPool | None = None,
                 cache_dir: Path | None = None) -> None:
        self.log = log or EventLog()
        self._pool = pool
        self._pool_lock = threading.Lock()
        self.cache_dir = cache_dir or state_dir() / "cache"

    @property
    def pool(self) -> WorkerPool:
        with self._pool_lock:
            if self._pool is None:
                self._pool = WorkerPool(root=self.cache_dir / "workers")
            return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        self.log.close()

    # -- validation ---------------------------------------------------------------------------------

    @staticmethod
    def resolve(problem: str, shape: str | None) -> str:
        """The shape a call means (default bench), or UnknownInput naming what exists: the one check of a problem
        and shape name for every surface (MCP tools, the CLI's jobs, `marathon run`)."""
        try:
            p = get_problem(problem)
        except KeyError as exc:
            raise UnknownInput(str(exc.args[0])) from None
        shape = shape or "bench"
        if shape not in p.shapes:
            raise UnknownInput(f"problem {problem!r} has no shape {shape!r} (valid: {', '.join(p.shapes)})")
        return shape

    @staticmethod
    def check_baseline(problem: str, name: str | None) -> None:
        """A baseline named by the caller is one of the problem's: checked before any job, on a GPU or not (a CPU
        profile times nothing, and would otherwise take any name)."""
        if name is None:
            return
        valid = [b.name for b in get_problem(problem).baselines]
        if name not in valid:
            raise UnknownInput(f"problem {problem!r} has no baseline {name!r} (valid: {', '.join(valid) or 'none'})")

    @staticmethod
    def check_l2(l2: str | None) -> str:
        """The L2 regime of a profile, checked here once for every surface (CLI, MCP), so a bad value gets the
        same answer whichever way it came in. None is the default, "cold"."""
        l2 = "cold" if l2 is None else l2
        if l2 not in L2_REGIMES:
            raise UnknownInput(f"unknown l2 regime {l2!r} (valid: {', '.join(L2_REGIMES)}): 'cold' flushes the L2 "
                               "before every timed rep, 'warm' does not")
        return l2

    @staticmethod
    def check_source(source: str) -> None:
        """A candidate is one Python file: refuse what cannot be one before anything is logged or run."""
        size = len(source.encode("utf-8", "surrogatepass"))
        if size > MAX_SOURCE_BYTES:
            raise UnknownInput(f"the candidate source is {size:,} bytes; a candidate file may hold at most "
                               f"{MAX_SOURCE_BYTES:,}")
        if "\x00" in source:
            raise UnknownInput("the candidate source holds NUL bytes: it is not a Python text file")

    # -- logging helpers ----------------------------------------------------------------------------

    def _intent(self, tool: str, args: dict[str, Any], run_id: str | None, client: dict[str, Any] | None,
                call_id: str | None) -> Any:
        digest = intent_key(tool, args)
        key = keys.intent(run_id, call_id or uuid.uuid4().hex, digest)
        logged_args = {k: v for k, v in args.items() if k != "source"}
        if "source" in args:
            logged_args["source_sha"] = self.log.put_source(args["source"])
        return self.log.append("tool.intent", {"tool": tool, "args_digest": digest, "args": logged_args,
                                               "client": (client or {}).get("name"),
                                               "session": (client or {}).get("session")},
                               run_id=run_id, key=key)

    def _result(self, tool: str, intent: Any, ok: bool, result: Any, error: str | None,
                run_id: str | None) -> None:
        self.log.append("tool.result", {"tool": tool, "intent_id": intent.id, "ok": ok, "result": result,
                                        "error": error}, run_id=run_id, key=keys.tool_result(intent.id))

    def _attempt(self, tool: str, report: CompileResult | ProfileResult, sha: str, run_id: str | None,
                 intent_id: int) -> int:
        cls = report.error_class
        outcome = outcome_for(tool, bool(report.ok), cls)
        payload: dict[str, Any] = {
            "problem": report.problem, "shape": report.shape, "source_sha": sha, "tool": tool,
            "outcome": outcome, "error_class": cls, "error": _first_error(report), "error_line": None,
            "max_rel_err": None, "median_us": None, "spread_pct": None, "timing_mode": None, "l2": None,
            "speedup": None, "baseline": None, "baseline_us": None, "device": "none", "intent_id": intent_id,
            "verified": False, "verification": None,
        }
        if isinstance(report, ProfileResult):
            timing, baseline = report.timing, report.baseline
            # Only the judge's own verdict, with every check passed, is verified (state.events ATTEMPT).
            verified = report.verified is True and outcome == "correct"
            payload.update({
                "error_line": report.error_line, "max_rel_err": report.max_rel_err,
                "median_us": timing.median_us if timing else None, "spread_pct": timing.spread_pct if timing else None,
                "timing_mode": timing.mode if timing else None, "l2": timing.l2 if timing else None,
                "speedup": report.speedup, "baseline": baseline.name if baseline else None,
                "baseline_us": baseline.median_us if baseline else None,
                "device": report.device.get("name", "cpu") if report.device is not None else "none",
                "verified": verified,
                "verification": (report.verification or {}).get("by") if report.verified else None})
        else:
            payload["kernels"] = [{k: getattr(kern, k) for k in ("name", "registers", "spill_bytes", "shared_bytes",
                                                                  "uses_wgmma", "uses_tma", "num_warps", "num_stages")}
                                  for kern in report.kernels]
        return self.log.append("attempt", payload, run_id=run_id).id

    # -- operations ---------------------------------------------------------------------------------

    def problems(self) -> list[dict[str, Any]]:
        return [p.describe() for p in list_problems()]

    def problem_source(self, problem: str, which: str) -> str:
        self.resolve(problem, None)
        if which == "starter":
            return starter_path(problem).read_text()
        if which == "solution":
            path = solution_path(problem)
            if path is None:
                raise UnknownInput(f"problem {problem!r} has no solution.py yet")
            return path.read_text()
        if which == "reference":
            folder = starter_path(problem).parent
            parts = [(folder / name).read_text() for name in ("problem.py", "reference.py")
                     if (folder / name).exists()]
            return "\n\n".join(parts)
        raise UnknownInput(f"unknown source {which!r} (starter, solution, reference)")

    def compile(self, problem: str, source: str, shape: str | None = None, *, want_asm: bool = False,
                want_lines: bool = False, run_id: str | None = None, client: dict[str, Any] | None = None,
                call_id: str | None = None, timeout: float | None = None,
                progress: Progress | None = None) -> CompileResult:
        self.check_source(source)
        shape = self.resolve(problem, shape)
        args = {"problem": problem, "shape": shape, "source": source, "want_asm": want_asm}
        if want_lines:
            args["want_lines"] = True
        intent = self._intent("compile", args, run_id, client, call_id)
        report = compile_candidate(problem, source, shape, want_asm=want_asm, want_lines=want_lines,
                                   cache_dir=self.cache_dir, timeout=timeout,
                                   progress=None if progress is None else
                                   lambda stage: progress({"stage": stage, "done": None, "total": None}))
        sha = self.log.put_source(source)
        report.attempt_id = self._attempt("compile", report, sha, run_id, intent.id)
        self._result("compile", intent, report.ok, _without_asm(report), _first_error(report), run_id)
        return report

    def profile(self, problem: str, source: str, shape: str | None = None, *, run_id: str | None = None,
                client: dict[str, Any] | None = None, call_id: str | None = None,
                progress: Progress | None = None, cancel: threading.Event | None = None,
                graph: bool | None = None, baseline: str | None = None,
                timeout: float | None = None, ncu: bool = False, l2: str | None = None) -> ProfileResult:
        self.check_source(source)
        shape = self.resolve(problem, shape)
        self.check_baseline(problem, baseline)
        l2 = self.check_l2(l2)
        args = {"problem": problem, "shape": shape, "source": source, "graph": graph, "baseline": baseline}
        if ncu:
            args["ncu"] = True
        if l2 != "cold":  # the default stays out, so a call's digest is what it was before the option existed
            args["l2"] = l2
        intent = self._intent("profile", args, run_id, client, call_id)
        job = {"op": "profile", "problem": problem, "shape": shape, "source": source,
               "graph": "auto" if graph is None else graph, "baseline": baseline, "l2": l2}
        # The judge's verdict, read back through its schema (a pool fault names no problem or shape).
        report = received(ProfileResult, self.pool.run(job, timeout=timeout, progress=progress, cancel=cancel),
                          problem=problem, shape=shape)
        if report.verified and report.timing is not None and l2 != "cold":
            _not_compared(report, l2)
        elif report.verified and report.timing is not None:
            self._census(problem, source, shape, report, report.timing.median_us, run_id, progress, cancel)
        if ncu and report.timing is not None:
            report.ncu = self._ncu(problem, source, shape, report.timing, progress)
        if "device" not in report.model_fields_set:
            report.device = self._device_info()
        sha = self.log.put_source(source)
        report.source_sha = sha
        report.attempt_id = self._attempt("profile", report, sha, run_id, intent.id)
        self._result("profile", intent, report.ok, report.as_dict(), report.error, run_id)
        return report

    def _census(self, problem: str, source: str, shape: str, report: ProfileResult, median: float,
                run_id: str | None, progress: Progress | None, cancel: threading.Event | None) -> None:
        """The kernel census (tools.census) for a verified timing that is about to become a best: the fastest
        verified attempt of its problem, shape and device in the whole log or in its run. Kept in the log per
        source, so a source is censused once. A refusal takes the verdict back."""
        device = (report.device or {}).get("name", "none")
        rivals = [self.log.best(problem, shape, device=device)]
        if run_id is not None:
            rivals.append(self.log.best(problem, shape, device=device, run_id=run_id))
        if not any(r is None or r.get("median_us") is None or median < r["median_us"] for r in rivals):
            # Not censused, so not verified: it could not have become a best anyway, and `verified` means the
            # judge vouches for the whole verdict, Triton doing the work included.
            _set_census(report, {"status": "not_needed", "reason": "slower than the best attempts it would replace"})
            report.verified = False
            return
        sha = self.log.put_source(source)
        key = keys.census(sha, problem, shape, device)
        cached = self.log.by_key(key)
        if cached is not None:
            census = {**cached.payload["result"], "cached": True}
        else:
            census = self.pool.run({"op": "census", "problem": problem, "shape": shape, "source": source},
                                   progress=progress, cancel=cancel)
            if census.get("status") in {"passed", "refused"}:
                self.log.append("census", {"problem": problem, "shape": shape, "source_sha": sha,
                                           "device": device, "result": census}, run_id=run_id, key=key)
        verification = _set_census(report, census)
        status = census.get("status")
        disagrees = _census_time_disagrees(report, census)
        if status == "passed" and disagrees:
            _census_failed(report, disagrees)
        elif status == "passed":
            verification["by"] += "+census"
        elif status == "unprofiled" or (status == "unavailable" and os.environ.get(CENSUS_WAIVER) != "1"):
            # Without Nsight nothing outside the candidate's process sees what ran, and torch compute that escaped
            # its in-process guard would become a verified best: correct and timed, not verified. An operator
            # may waive the census for a machine without ncu (CENSUS_WAIVER); the report says it was waived.
            report.verified = False
            waiver = f"; set {CENSUS_WAIVER}=1 where the server runs to accept timings without one" \
                if status == "unavailable" else ""
            verification["note"] = f"not verified: no kernel census could run ({census.get('reason')}){waiver}"
        elif status == "unavailable":
            verification["census"] = {**census, "waived": True}
        elif status != "not_applicable":
            _census_failed(report, str(census.get("reason") or census.get("error") or status))

    def _ncu(self, problem: str, source: str, shape: str, timing: Timing,
             progress: Progress | None) -> dict[str, Any]:
        """Nsight Compute's kernel time for the same candidate, beside the profile's own median. A pool job, so
        it holds the GPU like any timed job (it must not run beside another client's timing)."""
        if progress is not None:
            progress({"stage": "Nsight Compute", "done": None, "total": None})
        result = self.pool.run({"op": "ncu_metrics", "problem": problem, "shape": shape, "source": source},
                               progress=progress)
        result.pop("worker_s", None)
        if (timing.l2 or "cold") != "cold":
            result["note"] = ("Nsight Compute flushes the caches before each kernel it measures: its time is a cold "
                              "one, not compared with this profile's warm median")
        elif result.get("ok") and result.get("gpu_time_us_per_call"):
            median = timing.median_us
            result["profile_vs_ncu_pct"] = 100.0 * (median - result["gpu_time_us_per_call"]) / \
                result["gpu_time_us_per_call"]
        return result

    def hotspots(self, problem: str, source: str, shape: str | None = None, *, top: int = 15,
                 save_dir: Path | None = None, run_id: str | None = None, client: dict[str, Any] | None = None,
                 call_id: str | None = None, progress: Progress | None = None) -> HotspotsResult:
        """Warp-stall samples per source line (tools.hotspots): a diagnosis, not an attempt; logged as a
        tool call. The static guard runs first, as for compile and profile; the Nsight run is a pool job, so it
        holds the GPU like a timed job."""
        self.check_source(source)
        shape = self.resolve(problem, shape)
        intent = self._intent("hotspots", {"problem": problem, "shape": shape, "source": source, "top": top},
                              run_id, client, call_id)
        violations = guard.static_check(source)
        if violations:
            report = HotspotsResult(problem=problem, shape=shape, ok=False, error="the candidate breaks the rules",
                                    error_class="rejected",
                                    errors=[CompileMessage.model_validate(v.to_dict()) for v in violations])
        else:
            if progress is not None:
                progress({"stage": "Nsight Compute", "done": None, "total": None})
            answer = self.pool.run({"op": "hotspots", "problem": problem, "shape": shape, "source": source,
                                    "top": top, "save_dir": str(save_dir) if save_dir else None}, progress=progress)
            answer.pop("worker_s", None)  # the pool's bookkeeping, not part of the hotspots report
            report = received(HotspotsResult, answer, problem=problem, shape=shape)
        self._result("hotspots", intent, report.ok, report.as_dict(), report.error, run_id)
        return report

    def baseline(self, problem: str, shape: str | None = None, *, refresh: bool = False,
                 run_id: str | None = None, client: dict[str, Any] | None = None,
                 call_id: str | None = None, progress: Progress | None = None,
                 cancel: threading.Event | None = None) -> BaselineResult:
        shape = self.resolve(problem, shape)
        intent = self._intent("baseline", {"problem": problem, "shape": shape, "refresh": refresh}, run_id,
                              client, call_id)
        device = self._device_info()
        cache_fields = {"problem": problem, "shape": shape, "gpu": device.get("name"),
                        "driver": device.get("driver"), "torch": device.get("torch"),
                        "triton": device.get("triton")}
        key = keys.baseline(cache_fields)
        report = None if refresh else _logged_baseline(self.log.key_versions(key))
        if report is None:
            report = received(BaselineResult, self.pool.run({"op": "baseline", "problem": problem, "shape": shape},
                                                            progress=progress, cancel=cancel),
                              problem=problem, shape=shape)
            report.cached = False
            timed = any(b.timing for b in report.baselines)
            if report.ok and timed:
                self.log.append("baseline", {"problem": problem, "shape": shape, **cache_fields,
                                             "results": report.as_dict()}, run_id=run_id,
                                key=key if self.log.by_key(key) is None else f"{key}:{uuid.uuid4().hex}")
        self._result("baseline", intent, report.ok, report.as_dict(), report.error, run_id)
        return report

    def record(self, tool: str, args: dict[str, Any], fn: Callable[..., Any], *, run_id: str | None = None,
               client: dict[str, Any] | None = None, call_id: str | None = None,
               summary: Callable[[Any], Any] | None = None, pass_intent: bool = False) -> Any:
        """Run a quick operation (a log query, a note) logged like the others: intent, then result.

        `summary(out)` is what the result event stores (default: `out` itself), so a page of
        attempts read back is recorded as the ids it returned, not copied into the log again.
        `pass_intent`: `fn` is given the intent's id (a note keeps it).
        """
        intent = self._intent(tool, args, run_id, client, call_id)
        try:
            out = fn(intent.id) if pass_intent else fn()
        except Exception as exc:
            self._result(tool, intent, False, None, str(exc), run_id)
            raise
        self._result(tool, intent, True, summary(out) if summary else out, None, run_id)
        return out

    def _device_info(self) -> dict[str, Any]:
        info: dict[str, Any] = self.pool.warm().get("device", {})
        return info

    # -- the log ------------------------------------------------------------------------------------

    def attempts(self, problem: str | None = None, shape: str | None = None, outcome: str | None = None,
                 run_id: str | None = None, limit: int = 20, offset: int = 0) -> list[dict[str, Any]]:
        return self.log.attempts(problem=problem, shape=shape, outcome=outcome, run_id=run_id, limit=limit,
                                 offset=offset)

    def attempt(self, attempt_id: int) -> dict[str, Any]:
        """One attempt whole: its payload, source, and the full tool result."""
        ev = self.log.get(attempt_id)
        if ev is None or ev.kind != "attempt":
            raise UnknownInput(f"no attempt with id {attempt_id}")
        out = {**ev.payload, "id": ev.id, "ts": ev.ts, "run_id": ev.run_id,
               "source": self.log.source(ev.payload.get("source_sha", ""))}
        results = [e for e in self.log.events(kinds=["tool.result"], after_id=ev.payload.get("intent_id", 0))
                   if e.payload.get("intent_id") == ev.payload.get("intent_id")][:1]
        out["result"] = results[0].payload.get("result") if results else None
        return out

    def best(self, problem: str, shape: str | None = None) -> dict[str, Any] | None:
        shape = self.resolve(problem, shape)
        return self.log.best(problem, shape)

    def note(self, text: str, problem: str | None = None, shape: str | None = None,
             tags: list[str] | None = None, run_id: str | None = None, intent_id: int | None = None) -> dict[str, Any]:
        """`intent_id`: the call's tool.intent, kept in the note so that a client resuming after a crash
        between the note and its tool.result finds the note it made instead of making it twice."""
        if problem is not None:
            self.resolve(problem, shape)
        payload: dict[str, Any] = {"problem": problem, "shape": shape, "text": text, "tags": tags or []}
        if intent_id is not None:
            payload["intent_id"] = intent_id
        ev = self.log.append("note", payload, run_id=run_id)
        return {"id": ev.id, "ts": ev.ts}

    def notes(self, problem: str | None = None, run_id: str | None = None, limit: int = 20) -> list[dict]:
        return self.log.notes(problem=problem, run_id=run_id, limit=limit)


def _logged_baseline(events: list[Any]) -> BaselineResult | None:
    """The newest baseline report kept under a cache key (a refresh, or a measurement that replaced an entry the
    schema no longer reads, is kept as a version of the key); None when none is readable: then it is measured
    again, once, since the new measurement becomes the newest version."""
    for event in events:
        try:
            return built(BaselineResult, {**event.payload["results"], "cached": True, "cached_event_id": event.id})
        except (ValidationError, UndeclaredFields):
            continue
    return None


def _set_census(report: ProfileResult, census: dict[str, Any]) -> dict[str, Any]:
    """The verdict's verification, with the census's answer in it."""
    verification = report.verification if report.verification is not None else {}
    verification["census"] = census
    report.verification = verification
    return verification


def _census_failed(report: ProfileResult, why: str) -> None:
    """The census takes the verdict back."""
    report.ok = report.correct = report.verified = False
    report.error_class, report.speedup, report.error = "census_failed", None, "kernel census: " + why


def _not_compared(report: ProfileResult, l2: str) -> None:
    """A timing in another L2 regime than the default is not compared with the best attempts (all cold), so it is
    not censused and, as any timing that could not become a best, not verified: a warm median never becomes a
    best or meets a goal set in cold ones."""
    _set_census(report, {"status": "not_needed",
                         "reason": f"an l2={l2} timing is not compared with the best attempts, which are timed cold"})
    report.verified = False


def _first_error(report: CompileResult | ProfileResult) -> str | None:
    if isinstance(report, ProfileResult):
        return str(report.error) if report.error else None
    if report.errors:
        e = report.errors[0]
        return f"{e.message}" + (f" (line {e.line})" if e.line else "")
    return None


def _without_asm(report: CompileResult) -> dict[str, Any]:
    """The compile report as the log keeps it: without the kernels' assembly."""
    out = report.as_dict()
    out["kernels"] = [{k: v for k, v in kern.items() if k not in ("ptx", "sass", "ttgir")}
                      for kern in out.get("kernels", [])]
    return out


# A cold profile's median and the census's kernel time a call must agree. Somewhat below it is believable: Nsight
# Compute flushes the caches before every kernel (a chain of kernels that hands data on through L2 runs faster
# unprofiled); far below it, the samples were under-reported. Far above it, the timed calls did work the census
# never saw: a candidate that detects the census can compute there on the host (or hand the work to a child) and
# launch one trivial kernel of its own, then run torch or a library in its timed reps. Measured on the H200
# (2026-12-02, seven censused honest profiles of three problems): the median is 0.98-1.04x the census's time a
# call. Above the kernels, a call may add its launches' own cost: at most 2.5 us each cold as a graph (one empty
# launch 4.1 us, two 5.4 us), far more where eager launches are host-bound (Triton's launch path takes the host
# tens of us). The census's launches are the candidate's to pad (empty kernels under Nsight), so each buys no more
# allowance than a launch honestly costs: in graph mode that is small, eager it is not (a known limit).
CENSUS_TIME_RATIO = 0.6
CENSUS_LAUNCH_ALLOWANCE_US = {"cuda_graph": 2.5, "eager": 50.0}
CENSUS_CALL_ALLOWANCE_US = 10.0


def _census_time_disagrees(report: ProfileResult, census: dict[str, Any]) -> str | None:
    """Why a cold profile's median cannot be believed next to the census's own kernel durations, or None."""
    kernel_us = census.get("kernel_us_per_call")
    timing = report.timing
    if timing is None or timing.median_us is None or not isinstance(kernel_us, (int, float)) or kernel_us <= 0:
        return None
    if (timing.l2 or "cold") != "cold":
        return None  # a warm median may rightly beat kernels timed with flushed caches; warm ones are not censused
    median = timing.median_us
    if median < CENSUS_TIME_RATIO * kernel_us:
        return (f"the profile's median ({median:.2f} us) is below {CENSUS_TIME_RATIO:.0%} of what its kernels took "
                f"under Nsight Compute ({kernel_us:.2f} us a call, caches flushed): the samples under-report")
    calls = census.get("calls")
    if not isinstance(calls, int) or calls <= 0:
        return None  # a census from before launches were counted a call
    launches = sum(int(k.get("launches") or 0) for k in census.get("kernels") or [] if isinstance(k, dict)) / calls
    per_launch = CENSUS_LAUNCH_ALLOWANCE_US.get(timing.mode or "eager", CENSUS_LAUNCH_ALLOWANCE_US["eager"])
    ceiling = kernel_us / CENSUS_TIME_RATIO + CENSUS_CALL_ALLOWANCE_US + per_launch * launches
    if median > ceiling:
        return (f"the profile's median ({median:.2f} us) is far above what its kernels took under Nsight Compute "
                f"({kernel_us:.2f} us a call, {launches:g} launches; at most {ceiling:.2f} us is believed): its "
                "timed calls did work the census did not see")
    return None
