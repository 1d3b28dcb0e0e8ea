"""The `profile` job, judged: the trusted side of every verdict (DESIGN.md §2 trust boundary, §4).

This runs in the warm worker, a process where candidate code never runs. It generates every input, computes
every reference, compares every output, times the baseline, applies the floor and the bracket, and writes
the verdict. The candidate itself runs in a fresh sandboxed process per source (tools.sandbox), driven over
tools.wire: what comes back from it (output tensors, timing samples) is data, read with limits, checked here.

Order of work, so that nothing the candidate leaves running can touch a trusted measurement: the baseline is
timed after the candidate's process and everything it started are killed.

Without a GPU the checks run under the Triton interpreter at the problem's small check shapes, in the same
kind of sandboxed process, and the result says plainly that nothing was timed.
"""

from __future__ import annotations

import math
import os
import random
import secrets
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernels import get_problem
from kernels.draws import KEY_WORDS, key_from_hex
from kernels.spec import Problem, as_outputs, compare
from tools import bounds, guard, telemetry, wire
from tools.candidate import source_sha
from tools.reports import ProfileResult, built
from tools.sandbox import Sandbox, Spawned, running_strays
from tools.timing import (
    GRAPH_BELOW_US,
    HOST_BOUND_SHARE,
    MAX_LOAD,
    RepOverhead,
    committed,
    keeps_gpu_ahead,
    raise_clocks,
    summarize,
)

TRIALS_AT_SHAPE = 3
TRIALS_PER_CHECK_SHAPE = 2
OUTPUT_LIMIT_BYTES = 4 << 30
LOAD_TIMEOUT_S = 300.0  # import + module-level code (a first JIT happens later, in the first call)
CALL_TIMEOUT_S = 300.0  # one entry() call: the first one JITs (and may autotune)
RETURN_INPUTS_BELOW_BYTES = 16 << 20  # trials whose inputs are smaller send them back after the call
STASH_BYTES = 4 << 30  # outputs kept on the candidate's GPU per batch of reps (the H200 has 139 GiB)
MAX_BATCH = 256
CHECK_BYTES = 768 << 20  # outputs fetched and compared over a profile's timed reps: about 1 s of transfers
MIN_CHECKS, MAX_CHECKS = 6, 256  # a rep that skips its work half the time survives 6 checks with p = 1/64
OUTPUT_WAIT_S = 0.5  # after a candidate's process ended, for its output's last bytes to arrive
BASELINE_FRESH_S = 600.0  # a baseline timing this young is re-used (tools.judge._time_baseline)
BASELINE_COOL_MAX_S = 30.0  # at most this long for the GPU to shed a slowdown by heat before a baseline is timed
CALIBRATION_FRESH_S = 600.0  # likewise the calibration of a rep's untimed work, per problem and shape
REFERENCE_BUDGET_S = 1.5  # references computed for the checked timed reps, beyond MIN_CHECKS of them
EMPTY_BATCHES = 5  # to measure the fixed latency of a batch (request, reply, synchronise)
# Empty batches are the only ones a candidate's process can tell apart, so it could answer them slowly to buy its
# samples slack. The latency the bracket subtracts is therefore at most the judge's own figure, the same harness
# in a process that loads no candidate (NULL_SOURCE: trusted, it never runs candidate code), plus this margin for
# what a loaded candidate's process honestly adds (its buffers, its graph) and a round trip's jitter above its
# least. A process that stalls its empty batches gains at most this beyond the bracket's LATENCY_JITTER_US.
TRUSTED_LATENCY_MARGIN_US = 300.0
NULL_BATCHES = 7  # the trusted process's empty batches; the first pays one-off costs and is not counted
# The judge's pause before each of them. A candidate's empty batch follows the judge's work on the batch before
# (its fetches and references: milliseconds in which the candidate's process sleeps), and a process that wakes from
# a sleep answers slower: on the CPU (benchmarks/probe_batch_latency.py) the null process took 100-275 us asked
# back to back and 550-900 us after 5-20 ms, as much as a candidate's did. Asked back to back, the trusted figure
# was the warm one and every honest profile's latency the cap (H200: 644-882 us measured, 101-233 us trusted).
NULL_GAP_S = 0.01
NULL_SOURCE = ('"""The judge\'s null candidate: its process answers empty batches, the trusted round trip."""\n\n\n'
               "def entry(*inputs):\n    return inputs\n")
MIN_REPS, MAX_REPS = 30, 2000  # timed reps of a GPU profile
VERIFICATION = "judge:v1"


class Refusal(Exception):
    """A verdict against the candidate, reached by the judge."""

    def __init__(self, error_class: str, message: str, line: int | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.line = line
        self.extra = extra


@dataclass
class Session:
    """One candidate process, driven by the judge."""

    sandbox: Sandbox
    spawned: Spawned
    deadline: float
    exit_status: str | None = None
    calls: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def sock(self) -> socket.socket:
        return self.spawned.sock

    def remaining(self, cap: float) -> float:
        return max(0.1, min(cap, self.deadline - time.monotonic()))

    def request(self, header: dict[str, Any], fds: list[int] | None = None, *, timeout: float,
                takes_fds: bool = False) -> wire.Message:
        """Send `header` (and `fds`, closed here) and wait for the answer. Descriptors come back only where the
        caller `takes_fds` (outputs, which it closes); any other answer's are closed at once, so a candidate cannot
        pin memory or use up this process's descriptors with answers that carry them."""
        try:
            wire.send(self.sock, header, fds)
            answer = wire.recv(self.sock, self.remaining(timeout))
            if not takes_fds:
                answer.close_fds()
            return answer
        except wire.WireTimeout:
            raise Refusal("timeout", f"the candidate did not answer `{header.get('op')}` within "
                          f"{self.remaining(timeout):.0f} s (a hang?); its process was stopped") from None
        except (wire.PeerClosed, BrokenPipeError, ConnectionResetError):
            self.exit_status = self.sandbox.reap(self.spawned)
            raise Refusal("crashed", f"the candidate's process died ({self.exit_status})") from None
        except wire.WireError as exc:
            raise Refusal("protocol_error", f"the candidate's process broke the protocol: {exc}") from None
        finally:
            for fd in fds or []:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def close(self) -> str:
        if self.exit_status is None:
            self.exit_status = self.sandbox.reap(self.spawned)
        return self.exit_status

    def output(self, limit: int = 2000) -> dict[str, Any]:
        """What the candidate printed (the last `limit` bytes, and how many it printed in all). After the process
        ended, its last writes are waited for; a live process (kept for a repeat profile) has nothing to flush,
        and waiting for its pipe to close cost every such profile 0.5 s (OUTPUT_WAIT_S)."""
        return self.spawned.output.snapshot(limit, wait_s=OUTPUT_WAIT_S if self.exit_status is not None else 0.0)


def _raise_error(header: dict[str, Any]) -> None:
    err = header.get("error")
    if not isinstance(err, dict):
        raise Refusal("protocol_error", "the candidate's process answered neither a result nor an error")
    cls = str(err.get("error_class") or "runtime_error")
    # What the candidate's process says of its own failure: never a fault of the tools (internal_error is the
    # judge's to say, and reads as "retry"); anything outside this list is its runtime error.
    allowed = {"runtime_error", "rejected", "import_error", "wrong_output", "needs_gpu"}
    if cls == "internal_error":
        cls = "protocol_error"
    elif cls not in allowed:
        cls = "runtime_error"
    line = err.get("line") if isinstance(err.get("line"), int) else None
    message = str(err.get("message") or "the candidate raised")[:4000]
    if cls == "needs_gpu":
        message = (f"entry() launched the Gluon kernel {str(err.get('kernel'))[:200]}: Gluon kernels run only on a "
                   "GPU, and the "
                   "Triton interpreter that checks candidates on this machine cannot execute them. `compile` "
                   "reports their sm_90 resources here; check and time them where a GPU is present.")
    if header.get("fatal"):
        message += " (the CUDA context of the candidate's process was lost; the process is replaced)"
        cls = "cuda_error"
    raise Refusal(cls, message, line)


def _receive_outputs(msg: wire.Message, problem: Problem, refs: tuple[Any, ...], per: int | None = None,
                     device: str = "cuda") -> list[Any]:
    """The tensors of a reply, checked against the reference's count, shapes and a dtype whitelist."""
    specs = msg.header.get("tensors")
    if isinstance(specs, list) and per is None and isinstance(msg.header.get("n_outputs"), int):
        specs = specs[:msg.header["n_outputs"]]  # the inputs sent back after the outputs are read elsewhere
    if not isinstance(specs, list) or len(specs) > len(msg.fds):
        raise Refusal("protocol_error", f"the candidate's outputs arrived without their descriptors "
                                        f"({len(specs) if isinstance(specs, list) else 'no'} outputs, {len(msg.fds)} "
                                        f"descriptors; answer keys {sorted(msg.header)[:8]})")
    want = per if per is not None else len(refs)
    if per is None and len(specs) != len(refs):
        raise Refusal("wrong_output", f"entry() returned {len(specs)} outputs; expected {len(refs)} "
                                      f"({', '.join(problem.output_names)})")
    out = []
    for i, (spec, fd) in enumerate(zip(specs, msg.fds)):
        if not isinstance(spec, dict):
            raise Refusal("protocol_error", "an output spec is not an object")
        ref = refs[i % want]
        name = problem.output_names[i % want]
        if list(spec.get("shape", [])) != list(ref.shape):
            raise Refusal("wrong_shape", f"output '{name}' has shape {tuple(spec.get('shape', []))}; "
                                         f"expected {tuple(ref.shape)}")
        if spec.get("device") != device:
            raise Refusal("wrong_output", f"output '{name}' is on {spec.get('device')}; the inputs were on {device}")
        dtype = str(spec.get("dtype"))
        if dtype != problem.dtype_for(name, device):
            raise Refusal("wrong_output", f"output '{name}' is {dtype}; the problem asks for "
                                          f"{problem.dtype_for(name, device)}")
        try:
            out.append(wire.tensor_from_fd(fd, dtype, list(spec["shape"]), OUTPUT_LIMIT_BYTES))
        except wire.WireError as exc:
            raise Refusal("wrong_output", f"output '{name}': {exc}") from None
    return out


def _check_inputs_unchanged(msg: wire.Message, inputs: list[Any], n_outputs: int) -> None:
    specs = msg.header.get("tensors") or []
    back = list(zip(specs[n_outputs:], msg.fds[n_outputs:]))
    if len(back) != len(inputs):
        raise Refusal("protocol_error", "the inputs did not come back after the call")
    for i, ((spec, fd), x) in enumerate(zip(back, inputs)):
        try:
            after = wire.tensor_from_fd(fd, str(spec.get("dtype")), list(spec.get("shape", [])),
                                        x.numel() * x.element_size())
        except wire.WireError as exc:
            raise Refusal("input_mutated", f"entry() changed input #{i}: {exc}") from None
        if after.dtype != x.dtype or not bool((after.to(x.device) == x).all()):
            raise Refusal("input_mutated", f"entry() modified its input #{i}: inputs must be left unchanged")


def _compare_all(problem: Problem, outs: list[Any], refs: tuple[Any, ...], where: str) -> float:
    worst = 0.0
    for name, out, ref in zip(problem.output_names, outs, refs):
        verdict = compare(out.to(ref.device), ref, problem.tolerance_for(name))
        worst = max(worst, verdict["rel_err"])
        if not verdict["ok"]:
            cls = "nan" if "non-finite" in verdict["reason"] else "incorrect"
            raise Refusal(cls, f"output '{name}' {where}: {verdict['reason']}",
                          max_rel_err=None if math.isinf(worst) else worst)
    return worst


def _fail(error_class: str, error: str, line: int | None = None, **extra: Any) -> dict[str, Any]:
    return {"ok": False, "correct": False, "verified": False, "error_class": error_class, "error": error,
            "error_line": line, "max_rel_err": None, "timing": None, "speedup": None, **extra}


def check_plan(cuda: bool, problem: Problem, shape: str, timed: bool = False) -> list[tuple[str, int]]:
    """Guarded trials: (shape, seed) pairs. A timed profile checks its timed reps at the requested shape too, on
    fresh inputs, so one guarded trial there is enough."""
    shapes = [shape] if cuda else []
    plan = [(s, secrets.randbits(31)) for s in shapes for _ in range(1 if timed else TRIALS_AT_SHAPE)]
    for check in problem.check_shapes:
        if check != shape or not cuda:
            plan += [(check, secrets.randbits(31)) for _ in range(TRIALS_PER_CHECK_SHAPE)]
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


def run_profile(worker: Any, job: dict[str, Any]) -> ProfileResult:
    """The judge's verdict on one candidate, typed here: a report the schema does not fit is the judge's own fault
    (the worker answers it as an internal error)."""
    return built(ProfileResult, _judge(worker, job))


def _judge(worker: Any, job: dict[str, Any]) -> dict[str, Any]:
    problem = get_problem(job["problem"])
    shape = job.get("shape") or "bench"
    problem.dims(shape)
    source = job["source"]
    base = {"problem": problem.name, "shape": shape, "device": worker.device_info,
            "sandbox": worker.sandbox.describe()}

    violations = guard.static_check(source)
    if violations:
        first = violations[0]
        syntax = first.message.startswith("SyntaxError")
        return {**base, **_fail("syntax_error" if syntax else "rejected",
                                "; ".join(v.message + (f" (line {v.line})" if v.line else "") for v in violations),
                                first.line), "violations": [v.to_dict() for v in violations]}

    # Under the CPU interpreter, `cpu_timing` runs the timed protocol by the wall clock (for its tests): never a
    # figure of a kernel's speed, never verified, never against a baseline.
    timed = job.get("timing", True) and (worker.cuda or bool(job.get("cpu_timing")))
    baseline, why_not = primary_baseline(problem, job.get("baseline")) if timed and worker.cuda else (None, None)
    deadline = time.monotonic() + float(job.get("deadline_s", 590.0))
    plan = check_plan(worker.cuda, problem, shape, timed=bool(timed))
    result: dict[str, Any] = {**base, "shapes_checked": sorted({s for s, _ in plan})}
    graph_mode = job.get("graph", "auto")
    l2 = job_l2(job)

    phases: dict[str, float] = {}
    result["phases"] = phases
    timing_plan = None
    if timed:
        t0 = time.perf_counter()
        worker.progress("calibrating the timed reps")
        timing_plan = plan_timing(worker, problem, shape, l2, lambda: trusted_latency_us(worker))
        phases["calibration_s"] = round(time.perf_counter() - t0, 4)
    t0 = time.perf_counter()
    sha = source_sha(source)
    reused = take_parked(worker, sha)
    if reused is not None:
        session = reused
        session.deadline, session.calls, session.notes = deadline, 0, []
    else:
        session = Session(worker.sandbox, worker.sandbox.spawn(sha, source), deadline)
    result["notes"] = session.notes
    result["candidate_process"] = "reused" if reused is not None else "fresh"
    try:
        if reused is None:
            worker.progress("loading candidate")
            answer = session.request({"op": "load"}, timeout=LOAD_TIMEOUT_S)
            if not answer.header.get("ok"):
                _raise_error(answer.header)
        phases["spawn_load_s"] = round(time.perf_counter() - t0, 4)
        t0 = time.perf_counter()
        worst, trials = _check(worker, problem, plan, session)
        _refuse_strays(worker, session, "after its checks")
        phases["checks_s"] = round(time.perf_counter() - t0, 4)
        t0 = time.perf_counter()
        result.update(max_rel_err=worst, trials=trials)
        if not timed:
            park(worker, session, sha)
            result.update(session.output())
            note = ("no GPU: correctness was checked under the Triton interpreter at the small check shapes "
                    f"({', '.join(result['shapes_checked'])}); no timing was taken") if not worker.cuda \
                else "timing not requested"
            # Correct, but not verified: without a GPU no kernel census can see torch compute that escaped the
            # in-process guard, and nothing was timed.
            return {**result, "ok": True, "correct": True, "verified": False, "error_class": None, "error": None,
                    "candidate_exit": session.exit_status,
                    "error_line": None, "timing": None, "speedup": None, "baseline": None, "timing_note": note,
                    "verification": {"by": VERIFICATION, "checked_calls": session.calls, "bounds": None,
                                     "census": {"status": "not_applicable",
                                                "reason": "no GPU: kernels ran under the interpreter"},
                                     "note": "correctness checked by the judge; verified needs a GPU timing and "
                                             "census"}}
        assert timing_plan is not None
        session_timing = _time_candidate(worker, problem, shape, session, graph_mode, job, timing_plan)
        phases["timing_s"] = round(time.perf_counter() - t0, 4)
        phases["timed_loop_s"] = round(session_timing["timing_loop"]["wall_s"], 4)
    except Refusal as r:
        status = session.close()
        extra = dict(r.extra)
        return {**result, **_fail(r.error_class, r.message, r.line, **extra), "candidate_exit": status,
                "trials": extra.get("trials", result.get("trials")), **session.output()}
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError, ArithmeticError) as exc:
        # A reply that passed the wire's checks but not a field's: the candidate's process broke the protocol.
        status = session.close()
        return {**result, **_fail("protocol_error", f"the candidate's process sent a malformed answer "
                                                    f"({type(exc).__name__}: {str(exc)[:300]})"),
                "candidate_exit": status, **session.output()}
    except BaseException:
        session.close()  # nothing it started may outlive the job, whatever went wrong here
        raise
    t0 = time.perf_counter()
    must_time_baseline = baseline is not None and why_not is None and \
        _held_baseline(worker, problem, shape, baseline, job) is None
    # A baseline is timed only while no candidate process exists: the process is reaped then, else kept for a
    # repeat profile of the same source.
    status = session.close() if must_time_baseline else park(worker, session, sha)
    result.update(session.output())
    phases["reap_s"] = round(time.perf_counter() - t0, 4)
    t0 = time.perf_counter()

    # The baseline, timed while no candidate process exists (the one above is dead and reaped), or re-used.
    out_baseline: dict[str, Any] | None = None
    if baseline is not None and why_not is None:
        worker.progress("timing the baseline")
        out_baseline = {"name": baseline.name,
                        **_time_baseline(worker, problem, shape, baseline, job)}
    else:
        out_baseline = {"name": getattr(baseline, "name", None), "error": why_not}
    phases["baseline_s"] = round(time.perf_counter() - t0, 4)
    return _verdict(worker, problem, shape, result, session_timing, out_baseline, status)


def _check(worker: Any, problem: Problem, plan: list[tuple[str, int]], session: Session) -> tuple[float, list]:
    trials: list[dict[str, Any]] = []
    worst = 0.0
    for shape, seed in plan:
        worker.progress(f"checking {shape} (seed {seed})")
        t0 = time.perf_counter()
        inputs = problem.inputs(shape, seed, worker.device)
        refs = as_outputs(problem.reference(*inputs))
        if worker.cuda:
            worker.torch.cuda.synchronize()
        t_ref = time.perf_counter() - t0
        generate = {"problem": problem.name, "shape": shape, "seed": seed}
        tensors_in = [x for x in inputs if isinstance(x, worker.torch.Tensor)]
        # Small inputs come back after the call, so that the judge, not the candidate's process, sees a change.
        return_inputs = sum(x.numel() * x.element_size() for x in tensors_in) <= RETURN_INPUTS_BELOW_BYTES
        t0 = time.perf_counter()
        answer = session.request({"op": "call", "generate": generate, "return_inputs": return_inputs},
                                 timeout=CALL_TIMEOUT_S, takes_fds=True)
        session.calls += 1
        if answer.header.get("ok") and answer.header.get("checksums") != wire.checksums(inputs):
            # Generated otherwise over there (or claimed so): send this trial's inputs instead.
            answer.close_fds()
            session.notes.append(f"inputs of {shape} (seed {seed}) were sent: the generated ones differed")
            specs, fds = wire.pack_values(inputs)
            answer = session.request({"op": "call", "inputs": specs, "return_inputs": return_inputs}, fds,
                                     timeout=CALL_TIMEOUT_S, takes_fds=True)
        try:
            if not answer.header.get("ok"):
                _raise_error(answer.header)
            outs = _receive_outputs(answer, problem, refs, device=worker.device)
            if return_inputs:
                _check_inputs_unchanged(answer, tensors_in, len(outs))
            mutated = answer.header.get("mutated") or []
            if not isinstance(mutated, list) or not all(isinstance(i, int) for i in mutated):
                raise Refusal("protocol_error", "the candidate's process sent a malformed answer (mutated)")
            if mutated:
                raise Refusal("input_mutated", f"entry() modified its input #{mutated[0]}: inputs must be left "
                                               "unchanged")
            err = _compare_all(problem, outs, refs, f"at shape {shape} (seed {seed})")
            times = {"reference_s": round(t_ref, 4), "call_s": round(time.perf_counter() - t0, 4),
                     "candidate": _diagnostic_times(answer.header.get("times"))}
        except Refusal as r:
            trials.append({"shape": shape, "seed": seed, "ok": False, "error_class": r.error_class,
                           "error": r.message})
            r.extra["trials"] = trials
            raise
        finally:
            answer.close_fds()
        worst = max(worst, err)
        trials.append({"shape": shape, "seed": seed, "ok": True, "max_rel_err": err, "times": times})
    return worst, trials


def _diagnostic_times(raw: Any) -> dict[str, float] | None:
    """The candidate's own account of a call's time: shown, never used (it is the candidate's to forge)."""
    if not isinstance(raw, dict):
        return None
    return {str(k)[:32]: float(v) for k, v in list(raw.items())[:8] if isinstance(v, (int, float))}


@dataclass(frozen=True)
class SettledLoad:
    load: int
    overhead_us: dict[bool, float]  # by graph mode, measured at `load`
    gpu_ahead: bool  # False where even MAX_LOAD left the host's queueing too close to the GPU work
    load_added_us: dict[bool, float]  # by graph mode: the overhead at `load` less the one at load 1


@dataclass
class TimingPlan:
    """What the timed reps need from the judge, prepared before the candidate's process exists.

    The calibration of a rep's untimed work is the figure the bracket subtracts from every batch. Measured
    while a candidate's process is alive, it could be inflated by that process loading the GPU only then
    (it can tell: it waits for the judge's next request), to buy itself slack; so it is measured here, before
    the spawn, for both timing modes, and the reference of the set-up inputs with it.
    """

    seed: int
    inputs: Any
    refs: tuple[Any, ...]
    reference_s: float
    out_shapes: list[tuple[tuple[int, ...], Any]]
    out_bytes: int
    per_batch: int
    settled: SettledLoad  # the rep's untimed work: its load and the overhead measured at it
    flush_bytes: int
    spin_cycles: int = 0
    l2: str = "cold"
    trusted_latency_us: float = bounds.MAX_LATENCY_US  # an empty batch's round trip to the judge's null process


@dataclass(frozen=True)
class HeldCalibration:
    """A problem and shape's calibration, kept by the worker for CALIBRATION_FRESH_S: measured with no candidate
    process alive, so that none can inflate it (nor slow the reference, whose time sets how many reps are checked)."""

    at: float  # time.monotonic()
    settled: SettledLoad
    reference_s: float
    trusted_latency_us: float


def job_l2(job: dict[str, Any]) -> str:
    """The L2 regime a job asks for. The service validated it (the one place a caller's value is checked); a job
    that names another regime fails where the regime is looked up (tools.timing.L2_REGIMES), never silently."""
    return str(job.get("l2") or "cold")


def calibration(worker: Any, l2: str, load: int = 1) -> Any:
    """The judge's instruments for the regime `l2` at `load` times its untimed work: the GPU's calibration (the
    ceilings measured with it), or the wall-clock one under the CPU interpreter (where nothing is loaded)."""
    if worker.cuda:
        return worker.ensure_timer().in_regime(l2, load)
    from tools.timing import WallCalibration

    return WallCalibration(l2)


def plan_timing(worker: Any, problem: Problem, shape: str, l2: str = "cold",
                trusted_latency: Callable[[], float] = lambda: bounds.MAX_LATENCY_US) -> TimingPlan:
    """What the timed reps need, measured (or held) before the candidate's process exists; `trusted_latency`
    measures an empty batch's round trip with no candidate (trusted_latency_us), held with the calibration."""
    torch = worker.torch
    device = worker.device
    seed = secrets.randbits(31)
    key = (problem.name, shape, l2)  # a warm rep's untimed work is not a cold one's
    held: HeldCalibration | None = worker.calibrations.get(key)
    fresh = held is not None and time.monotonic() - held.at < CALIBRATION_FRESH_S
    if not fresh:
        release_parked(worker)  # no candidate process may live while the judge calibrates
    t0 = time.perf_counter()
    inputs = problem.inputs(shape, seed, device)
    refs = as_outputs(problem.reference(*inputs))
    if worker.cuda:
        torch.cuda.synchronize()
    # How long a reference takes sets how many timed reps are checked: measured with no candidate process alive
    # (a parked one could load the GPU to slow it, and so cut its own checks), then held with the calibration. The
    # less of two: a fresh worker's first one pays one-off costs (on a CPU at softmax small, 2-4 ms against 0.13),
    # and a first one slowed further by a busy machine would cut the checks of every profile for ten minutes.
    if fresh and held is not None:
        reference_s = held.reference_s
    else:
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        as_outputs(problem.reference(*inputs))
        if worker.cuda:
            torch.cuda.synchronize()
        reference_s = min(first_s, time.perf_counter() - t0)
    # What the outputs are is the judge's to say (the reference's shapes, the problem's dtypes), never the
    # candidate's: its claims would set the overhead the bracket subtracts.
    out_shapes = [(tuple(r.shape), getattr(torch, problem.dtype_for(name, device)))
                  for name, r in zip(problem.output_names, refs)]
    out_bytes = sum(r.numel() * torch.empty((), dtype=dtype).element_size() for r, (_, dtype) in zip(refs, out_shapes))
    per_batch = int(max(2, min(MAX_BATCH, STASH_BYTES // max(out_bytes, 1))))

    def calibrate(calib: Any, graph: bool) -> RepOverhead:
        return calib.overhead_us(lambda buffers, i, key: problem.refill(buffers, shape, secrets.randbits(31), key),
                                 inputs, out_shapes, slots=per_batch, graph=graph)

    if fresh and held is not None:
        settled = held.settled
    else:
        modes = (False, True) if worker.cuda else (False,)
        if worker.cuda:
            raise_clocks()  # calibrated at the idle clock, the overhead would be the slow one

        def runs_at(load: int) -> dict[bool, list[RepOverhead]]:
            calib = calibration(worker, l2, load)
            calibrate(calib, modes[-1])  # its first sequence's one-off costs; not kept
            return {g: [calibrate(calib, g), calibrate(calib, g)] for g in modes}

        settled = settle_load(runs_at)
        worker.calibrations[key] = held = HeldCalibration(time.monotonic(), settled, reference_s,
                                                          trusted_latency())
    assert held is not None
    calib = calibration(worker, l2, settled.load)
    return TimingPlan(seed, inputs, refs, reference_s, out_shapes, out_bytes, per_batch, settled,
                      int(calib.flush_bytes), int(calib.spin_cycles), l2, held.trusted_latency_us)


def trusted_latency_us(worker: Any) -> float:
    """The least wall time of an empty batch answered by a process of the judge's own (NULL_SOURCE, spawned like a
    candidate's, from the zygote): what a batch's fixed latency is when nobody stalls it, each asked after a pause
    as a candidate's empty batches are (NULL_GAP_S). Measured, as the calibration is, with no candidate process
    alive."""
    sha = source_sha(NULL_SOURCE)
    session = Session(worker.sandbox, worker.sandbox.spawn(sha, NULL_SOURCE), time.monotonic() + CALL_TIMEOUT_S)
    try:
        walls = []
        for header in [{"op": "load"}] + [{"op": "batch", "seeds": []}] * NULL_BATCHES:
            if header["op"] == "batch":
                time.sleep(NULL_GAP_S)
            t0 = time.perf_counter()
            answer = session.request(header, timeout=CALL_TIMEOUT_S)
            walls.append((time.perf_counter() - t0) * 1e6)
            if not answer.header.get("ok"):
                raise RuntimeError(f"the judge's null process failed `{header['op']}`: {answer.header.get('error')}")
        return min(walls[2:])  # noise only lengthens a round trip: the least is the one nothing slowed
    except Refusal as exc:  # a fault of the judge's own process, not a verdict
        raise RuntimeError(f"the judge's null process failed: {exc.message}") from None
    finally:
        session.close()


def settle_load(runs_at: Callable[[int], dict[bool, list[RepOverhead]]]) -> SettledLoad:
    """The least load (1, 2, 4, ... MAX_LOAD) at which every graph mode's calibration runs show their untimed GPU
    work ahead of the host's queueing of it (tools.timing.keeps_gpu_ahead), and the overhead measured there. Off a GPU
    no run has a queue to keep ahead (host_us 0): load 1."""
    load = 1
    unloaded: dict[bool, float] | None = None
    while True:
        runs = runs_at(load)
        overhead = {g: statistics.fmean(r.us for r in rs) for g, rs in runs.items()}
        unloaded = unloaded or overhead
        ahead = all(keeps_gpu_ahead(rs) for rs in runs.values())
        if ahead or load >= MAX_LOAD:
            return SettledLoad(load, overhead, ahead, {g: max(0.0, overhead[g] - unloaded[g]) for g in overhead})
        load = min(2 * load, MAX_LOAD)


def planned_reps(budget_us: float, rep_us: float) -> int:
    """Timed reps for a budget at `rep_us` a rep, within [MIN_REPS, MAX_REPS]."""
    return int(max(MIN_REPS, min(MAX_REPS, budget_us / max(rep_us, 1.0))))


def takes_graph(gpu_us: Any, host_us: Any) -> bool:
    """Auto mode: graph replay for a short call (GPU time under GRAPH_BELOW_US) or one whose host time is a large
    share of its GPU time. Eager reps of the latter are bound by the host, and the wall the bracket checks holds
    host time no sample shows (a tuner's MLA configuration at B = 1: 34 us of GPU, over 200 us of launching, refused
    as timing_mismatch). The values come from the candidate's process: a lie changes only the mode and the size of
    the first batch (the total, and where the empty batches fall, are planned again from the judge's own wall time
    of that batch), and both modes are bracketed."""
    if not isinstance(gpu_us, (int, float)) or not math.isfinite(gpu_us):
        return False
    host = float(host_us) if isinstance(host_us, (int, float)) and math.isfinite(host_us) else 0.0
    return gpu_us < GRAPH_BELOW_US or host > HOST_BOUND_SHARE * gpu_us


def _time_candidate(worker: Any, problem: Problem, shape: str, session: Session, graph_mode: Any,
                    job: dict[str, Any], plan: TimingPlan) -> dict[str, Any]:
    """Timed reps in the candidate's process, every batch bracketed here and a sample of reps checked here."""
    torch = worker.torch
    device = worker.device
    if not worker.cuda:
        graph_mode = False  # no graphs off a GPU
    if graph_mode == "auto":
        worker.progress("pilot timing")
        generate = {"problem": problem.name, "shape": shape, "seed": secrets.randbits(31)}
        answer = session.request({"op": "pilot", "generate": generate}, timeout=CALL_TIMEOUT_S)
        if not answer.header.get("ok"):
            _raise_error(answer.header)
        pilot = answer.header.get("pilot_us")
        graph = takes_graph(pilot, answer.header.get("host_us"))
    else:
        pilot = None
        graph = bool(graph_mode)

    setup_inputs, setup_refs, out_shapes = plan.inputs, plan.refs, plan.out_shapes
    worker.progress("timing: capture" if graph else "timing: warm-up")
    answer = session.request({"op": "time_setup", "generate": {"problem": problem.name, "shape": shape,
                                                               "seed": plan.seed},
                              "graph": graph, "flush_bytes": plan.flush_bytes, "spin_cycles": plan.spin_cycles},
                             timeout=CALL_TIMEOUT_S)
    if not answer.header.get("ok"):
        _raise_error(answer.header)
    if answer.header.get("checksums") != wire.checksums(setup_inputs):
        # Every timed rep regenerates its inputs over there from a seed: they must be the judge's.
        raise Refusal("protocol_error", "the candidate's process generates other inputs from the judge's seeds "
                                        "than the judge does")
    if answer.header.get("graph") is not graph:
        raise Refusal("protocol_error", "the candidate's process did not take the timing mode the judge chose")
    expected = [{"shape": list(shape), "dtype": str(dtype).removeprefix("torch.")} for shape, dtype in out_shapes]
    claimed = answer.header.get("outputs")
    if not isinstance(claimed, list) or [{"shape": c.get("shape"), "dtype": c.get("dtype")} if isinstance(c, dict)
                                         else None for c in claimed] != expected:
        raise Refusal("wrong_output", "the outputs of the timed calls differ in number, shape or dtype from what "
                                      "the problem asks for")
    out_bytes, per_batch, reference_s = plan.out_bytes, plan.per_batch, plan.reference_s
    overhead = plan.settled.overhead_us[graph]
    budget_us = float(job.get("budget_s", 2.0)) * 1e6
    # How many reps: as many as the budget buys at a rep's time. The first batch's size comes from the pilot, the
    # candidate's own figure, and so does nothing more: the total is planned again from the judge's wall time of
    # that batch (a small total would mean few batches, and a wider allowance for each batch's latency jitter).
    per_rep_guess = overhead + (float(pilot) if isinstance(pilot, (int, float)) and math.isfinite(pilot) else 50.0)
    reps = planned_reps(budget_us, per_rep_guess) if worker.cuda else 30
    n_batches = math.ceil(reps / per_batch)
    # How many reps to fetch in all: every rep where outputs are small, else what the transfer budget allows. Each
    # fetched rep's digest and key are checked (they need no reference); no more of them are compared with a
    # reference than REFERENCE_BUDGET_S buys (KDA's recurrent one is slow at bench): which ones, the candidate's
    # process cannot see.
    affordable = max(MIN_CHECKS, int(REFERENCE_BUDGET_S / max(reference_s, 1e-6)))

    def wanted_fetches(reps: int) -> int:
        return int(min(reps, MAX_CHECKS, max(MIN_CHECKS, CHECK_BYTES // max(out_bytes, 1))))

    fetches_wanted = wanted_fetches(reps)

    rng = random.Random(secrets.randbits(64))
    rep_inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in setup_inputs]  # refilled per checked rep
    samples: list[float] = []
    batches: list[bounds.BatchRecord] = []
    empty_walls: list[float] = []
    empty_host: list[float] = []  # the candidate's own figure of its part of each: a diagnosis, never subtracted
    empty_at = set(rng.sample(range(n_batches + EMPTY_BATCHES), EMPTY_BATCHES))
    checked = fetched_reps = 0
    worst = 0.0
    started_unix = time.time()
    wall_start = time.perf_counter()
    done = 0
    step = 0


    def empty_batch() -> None:
        t0 = time.perf_counter()
        answer = session.request({"op": "batch", "seeds": []}, timeout=CALL_TIMEOUT_S)
        empty_walls.append((time.perf_counter() - t0) * 1e6)
        if not answer.header.get("ok"):
            _raise_error(answer.header)
        host_s = answer.header.get("host_s")
        if isinstance(host_s, (int, float)) and math.isfinite(host_s):
            empty_host.append(host_s * 1e6)

    while done < reps:
        if step in empty_at:  # an empty batch, at a random place among the real ones
            step += 1
            empty_batch()
            continue
        step += 1
        k = min(per_batch, reps - done)
        seeds = [secrets.randbits(31) for _ in range(k)]
        t0 = time.perf_counter()
        answer = session.request({"op": "batch", "seeds": seeds}, timeout=CALL_TIMEOUT_S)
        wall_us = (time.perf_counter() - t0) * 1e6
        if not answer.header.get("ok"):
            _raise_error(answer.header)
        us = answer.header.get("us")
        if not isinstance(us, list) or len(us) != k or not all(isinstance(x, (int, float)) for x in us):
            raise Refusal("protocol_error", "the candidate's process reported malformed timing samples")
        batch_samples = [float(x) for x in us]
        if not all(math.isfinite(x) for x in batch_samples):
            raise Refusal("timing_mismatch", "the candidate's process reported non-finite timing samples")
        commits = answer.header.get("commits")
        if not isinstance(commits, list) or len(commits) != k or not all(
                isinstance(c, list) and all(isinstance(d, str) for d in c) for c in commits):
            raise Refusal("protocol_error", "the candidate's process sent no commitment to its timed reps' outputs")
        keys = answer.header.get("keys")
        if not isinstance(keys, list) or len(keys) != k or not all(_is_key(x) for x in keys):
            raise Refusal("protocol_error", "the candidate's process sent no keys for its timed reps' inputs")
        batches.append(bounds.BatchRecord(wall_us, batch_samples))
        samples.extend(batch_samples)
        if len(batches) == 1 or rng.random() < 2 / max(1, n_batches):  # and once the reps are done, below
            _refuse_strays(worker, session, "during its timed reps")
        if len(batches) == 1 and worker.cuda:  # the total, planned again from what the judge saw this batch take
            reps = max(done + k, planned_reps(budget_us, wall_us / k))
            fetches_wanted = wanted_fetches(reps)
            # ...and where the empty batches still to come fall among the batches left, drawn again
            left_empty = EMPTY_BATCHES - len(empty_walls)
            batches_left = math.ceil((reps - done - k) / per_batch)
            empty_at = {step + i for i in rng.sample(range(batches_left + left_empty), left_empty)}
        # Which reps to check is decided now, after they ran: this batch's share of the checks, drawn at random
        # (a fractional share becomes one check with that probability).
        share = fetches_wanted * k / reps
        n_check = min(k, int(share) + (1 if rng.random() < share - int(share) else 0))
        slots = sorted(rng.sample(range(k), n_check))
        per = len(setup_refs)
        chunk = max(1, wire.MAX_FDS // per)  # descriptors one message may carry
        for at in range(0, len(slots), chunk):
            part = slots[at:at + chunk]
            fetched = session.request({"op": "fetch", "slots": part}, timeout=CALL_TIMEOUT_S, takes_fds=True)
            try:
                outs = _receive_outputs(fetched, problem, setup_refs, per=per, device=device)
                if len(outs) != per * len(part):
                    raise Refusal("wrong_output", "the timed reps' outputs did not all come back")
                for n, j in enumerate(part):
                    where = f"of timed rep {done + j + 1} (a {'graph replay' if graph else 'call'})"
                    made = committed(outs[n * per:(n + 1) * per], gpu=worker.cuda)
                    if made.digests != commits[j]:
                        raise Refusal("timing_mismatch", f"the outputs {where} are not the ones it committed to "
                                                         "when its batch ended: they were written afterwards")
                    if made.key != keys[j]:
                        # The next rep drew its inputs from this key: one that its outputs do not give was made
                        # up before they existed, so that reps could be run ahead of the ones before them.
                        raise Refusal("timing_mismatch", f"the outputs {where} do not give the key its process "
                                                         "reported: the next rep's inputs were drawn before they "
                                                         "existed")
                    fetched_reps += 1
                    # The references the budget buys, spread over the fetches (the first ones, then in proportion).
                    if checked >= min(affordable, math.ceil(affordable * fetched_reps / fetches_wanted)):
                        continue
                    # This rep's inputs, as its process drew them: from its seed and the key of the rep before.
                    key = key_from_hex(keys[j - 1], device) if j else None
                    problem.refill(rep_inputs, shape, seeds[j], key)
                    refs = as_outputs(problem.reference(*rep_inputs))
                    worst = max(worst, _compare_all(problem, outs[n * per:(n + 1) * per], refs, where))
                    checked += 1
            finally:
                fetched.close_fds()
        done += k
        worker.progress("timing", done, reps)
    _refuse_strays(worker, session, "during its timed reps")
    while len(empty_walls) < EMPTY_BATCHES:  # those drawn after the last real batch
        empty_batch()
    wall_s = time.perf_counter() - wall_start
    # The median empty batch: stalling a few of them moves nothing; stalling most is capped by the judge's own
    # figure (TRUSTED_LATENCY_MARGIN_US).
    measured_latency = statistics.median(empty_walls)
    latency = min(measured_latency, plan.trusted_latency_us + TRUSTED_LATENCY_MARGIN_US)
    return {"graph": graph, "samples": samples, "batches": batches, "overhead_us": overhead, "pilot_us": pilot,
            "latency_us": latency, "measured_latency_us": measured_latency,
            "latency_host_us": statistics.median(empty_host) if empty_host else None,
            "trusted_latency_us": plan.trusted_latency_us, "l2": plan.l2, "settled": plan.settled,
            "checked_reps": checked, "fetched_reps": fetched_reps, "reps": reps, "per_batch": per_batch,
            "max_rel_err": worst,
            "timing_loop": {"wall_s": wall_s, "reps": reps, "batches": len(batches), "checked_reps": checked,
                            "started_unix": started_unix, "ended_unix": time.time()}}


def _refuse_strays(worker: Any, session: Session, when: str) -> None:
    """A process the candidate started that is alive while it is judged could do its work outside what the judge
    brackets and the census sees: a child with a scrubbed environment escapes ncu's injection, and fed through CUDA
    IPC it can run torch or a library while the candidate's own process launches only its Triton kernels. A
    candidate's work runs in its own process; Triton's compiler processes end before the call that started them
    returns."""
    strays = running_strays(worker.sandbox.zygote_pid, session.spawned.pid)
    if strays:
        raise Refusal("rejected", f"the candidate's process started other processes that were running {when} "
                                  f"({', '.join(strays[:4])}): a candidate's work must run in its own process")


def _is_key(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 8 * KEY_WORDS and all(c in "0123456789abcdef" for c in value)


def _time_baseline(worker: Any, problem: Problem, shape: str, baseline: Any, job: dict[str, Any]) -> dict[str, Any]:
    """The baseline's timing, re-used for BASELINE_FRESH_S: it is trusted code on the same GPU, so timing it
    again for every candidate (1 s for torch, 90 s for FLA's first autotune) buys nothing but noise. Timed in the
    candidate's L2 regime (a warm candidate against a warm baseline), and held per regime.

    Always replayed as a CUDA graph, whichever mode the candidate was timed in: the speedup must not move with a
    choice the caller makes (`graph`) or that the candidate's own host time makes (auto mode), and launched eagerly
    a baseline of many small kernels is bound by its host, not its GPU work (FLA's chunk_kda at KDA bench: 1,299 us
    eager, 948 us replayed), which would credit an eagerly timed candidate with the baseline's launch overhead. A
    baseline that cannot be captured is timed eagerly; its `mode` says which."""
    held = _held_baseline(worker, problem, shape, baseline, job)
    if held is not None:
        return held
    # Whoever decided to time it, no candidate process lives while it is timed: a parked one could load the GPU
    # (a thread of its own, while it waits) and slow the baseline, which is then held for every candidate.
    release_parked(worker)
    # ...nor while the GPU is still slowed by heat a candidate left behind (its last reps run hot on purpose).
    cooling = telemetry.wait_until_cool(BASELINE_COOL_MAX_S)
    l2 = job_l2(job)
    timer = calibration(worker, l2).timer
    inputs = problem.inputs(shape, secrets.randbits(31), "cuda")
    fn = baseline.fn
    budget_s = float(job.get("baseline_budget_s", job.get("budget_s", 2.0))) / 2
    capture_error = None
    try:
        stats = timer.measure({"baseline": lambda: fn(*inputs)}, graph=True, budget_s=budget_s)
    except Exception as exc:  # trusted code that a CUDA graph cannot hold (a host sync, a data-dependent shape)
        capture_error = f"{type(exc).__name__}: {str(exc)[:200]}"
        worker.torch.cuda.synchronize()
        stats = timer.measure({"baseline": lambda: fn(*inputs)}, graph=False, budget_s=budget_s)
    result = {**stats["baseline"], "l2": l2, "cooled_s": cooling.waited_s}
    notes = []
    if capture_error is not None:
        notes.append(f"timed eagerly: the baseline could not be captured as a CUDA graph ({capture_error})")
    if cooling.cleared is False:
        notes.append(f"timed with the GPU still slowed ({', '.join(cooling.reasons_before)}) after waiting "
                     f"{cooling.waited_s:.0f} s: not held for later profiles")
    if notes:
        result["note"] = "; ".join(notes)
    if cooling.cleared is not False:
        worker.baselines[_baseline_key(problem, shape, baseline, job)] = (time.monotonic(), result)
    return {**result, "age_s": 0.0}


def _baseline_key(problem: Problem, shape: str, baseline: Any, job: dict[str, Any]) -> tuple[Any, ...]:
    return (problem.name, shape, baseline.name, job.get("baseline_budget_s", job.get("budget_s")), job_l2(job))


def _held_baseline(worker: Any, problem: Problem, shape: str, baseline: Any,
                   job: dict[str, Any]) -> dict[str, Any] | None:
    """This worker's timing of the baseline if it is fresh enough to re-use, else None."""
    if job.get("fresh_baseline"):
        return None
    held = worker.baselines.get(_baseline_key(problem, shape, baseline, job))
    now = time.monotonic()
    if held is None or now - held[0] >= BASELINE_FRESH_S:
        return None
    return {**held[1], "age_s": round(now - held[0], 1)}


# -- a source's process kept for its next profile ------------------------------------------------------------
#
# A repeat profile of the same source (an agent re-measuring, a tuner's re-measure) costs a spawn, a load and
# a JIT from the disk cache when its process is new. The last source's process is kept instead, idle and with
# its timing state dropped, for PARK_S; any other job closes it first, so it never lives beside another
# candidate, a census, a baseline timing or a calibration. Only this source's own state carries over, which
# its timed reps (fresh inputs, checked after they ran) leave nothing to gain from.

PARK_S = 300.0


def park(worker: Any, session: Session, sha: str) -> str:
    try:
        answer = session.request({"op": "release"}, timeout=30.0)
        ok = bool(answer.header.get("ok"))
        answer.close_fds()
    except Refusal:
        ok = False
    if not ok or session.exit_status is not None:
        return session.close()
    release_parked(worker)
    worker.parked = (session, sha, time.monotonic())
    return "kept for a repeat profile of this source"


def take_parked(worker: Any, sha: str) -> Session | None:
    """The parked process of `sha`, taken from the worker; any other parked process is closed."""
    release_parked(worker, keep_sha=sha)
    parked = getattr(worker, "parked", None)
    if parked is None:
        return None
    worker.parked = None
    session = parked[0]
    try:  # a process that died while it was kept (its own doing) is replaced, not reported as a crash
        answer = session.request({"op": "ping"}, timeout=10.0)
        alive = bool(answer.header.get("ok"))
        answer.close_fds()
    except Refusal:
        alive = False
    if not alive:
        session.close()
        return None
    return session


def release_parked(worker: Any, keep_sha: str | None = None) -> None:
    """Close the parked process, unless it is `keep_sha`'s and still fresh."""
    parked = getattr(worker, "parked", None)
    if parked is None:
        return
    session, sha, since = parked
    if keep_sha == sha and time.monotonic() - since < PARK_S and session.exit_status is None:
        return
    worker.parked = None
    session.close()


def _verdict(worker: Any, problem: Problem, shape: str, result: dict[str, Any], timing: dict[str, Any],
             out_baseline: dict[str, Any] | None, status: str) -> dict[str, Any]:
    dims = problem.dims(shape)
    stats = summarize(timing["samples"])
    median_us = stats["median_us"]
    ceil = worker.ceilings or {}
    flops, nbytes = problem.flops(dims), problem.bytes(dims)
    floor = bounds.physical_floor(nbytes, flops, ceil)
    bracket = bounds.check_bracket(timing["batches"], timing["overhead_us"], timing["latency_us"],
                                   bounds.RELATIVE_SLACK if worker.cuda else bounds.CPU_RELATIVE_SLACK,
                                   load_added_us=timing["settled"].load_added_us[timing["graph"]])
    cand = {**stats, "mode": "cuda_graph" if timing["graph"] else "eager", "pilot_us": timing["pilot_us"],
            "l2": timing["l2"]}
    median_s = median_us * 1e-6
    achieved = {
        "gbps": nbytes / median_s / 1e9 if median_s > 0 else None,
        "tflops": flops / median_s / 1e12 if median_s > 0 else None,
        "dram_share": nbytes / median_s / 1e9 / ceil["dram_gbps"] if ceil.get("dram_gbps") and median_s > 0 else None,
        "bf16_share": flops / median_s / 1e12 / ceil["bf16_tflops"] if ceil.get("bf16_tflops") and median_s > 0
        else None,
        "floor_us": floor.floor_us if floor else None,
    }
    bounds_report = {"floor": floor.as_dict() if floor else None,
                     "bracket": {**bracket.as_dict(), "batch_latency_us": timing["latency_us"],
                                 "batch_latency_measured_us": timing["measured_latency_us"],
                                 "batch_latency_trusted_us": timing["trusted_latency_us"],
                                 "batch_latency_host_us": timing["latency_host_us"],
                                 "batch_reps": timing["per_batch"], "untimed_load": timing["settled"].load,
                                 "untimed_gpu_ahead": timing["settled"].gpu_ahead},
                     "checked_reps": timing["checked_reps"], "fetched_reps": timing["fetched_reps"],
                     "reps": timing["reps"]}
    verification = {"by": VERIFICATION + "+bounds", "checked_calls": len(result.get("trials") or []),
                    "checked_timed_reps": timing["checked_reps"], "bounds": bounds_report, "census": None}
    speedup = None
    if out_baseline and out_baseline.get("median_us"):
        speedup = out_baseline["median_us"] / median_us if median_us > 0 else None
    report = {**result, "ok": True, "correct": True, "verified": bool(worker.cuda), "error_class": None,
              "error": None, "error_line": None,
              "max_rel_err": max(result.get("max_rel_err") or 0.0, timing["max_rel_err"]),
              "timing": cand, "baseline": out_baseline, "speedup": speedup, "achieved": achieved,
              "ceilings": ceil, "telemetry": {"before": worker.telemetry_before,
                                              "after": telemetry.snapshot() if worker.cuda else None},
              "timing_loop": timing["timing_loop"], "verification": verification, "candidate_exit": status}
    if not worker.cuda:
        cand["mode"] = "cpu_wall_clock"
        report["timing_note"] = ("timed by the wall clock under the CPU interpreter, to exercise the timed checks: "
                                 "not a kernel's speed, never verified")
    if floor is not None and median_us < floor.floor_us:
        report.update(ok=False, correct=False, verified=False, error_class="impossible_timing", speedup=None,
                      error=f"a median of {median_us:.2f} us is below the physical floor of {floor.floor_us:.2f} us "
                            f"({nbytes / 1e6:.1f} MB at {ceil['dram_gbps'] * bounds.CEILING_MARGIN:.0f} GB/s, "
                            f"{flops / 1e9:.2f} GFLOP at {ceil['bf16_tflops'] * bounds.CEILING_MARGIN:.0f} TFLOP/s): "
                            "the timing cannot be real")
    elif not bracket.ok:
        hint = ("; an eager call that spends more host time than the GPU work queued ahead of it (short kernels "
                "launched from Python) leaves wall time the samples cannot show: time it with graph replay "
                "(graph on)") if not timing["graph"] and worker.cuda else ""
        report.update(ok=False, correct=False, verified=False, error_class="timing_mismatch", speedup=None,
                      error=f"timing refused: {bracket.reason}{hint}")
    if statistics.median(timing["samples"]) <= 0:
        report.update(ok=False, correct=False, verified=False, error_class="impossible_timing", speedup=None,
                      error="the reported timing samples are not positive")
    return report
