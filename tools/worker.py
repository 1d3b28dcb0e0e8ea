"""The warm worker process: the judge for one GPU (or the CPU interpreter). Candidate code never runs here.

Started by tools.pool as `python -m tools.worker IN_FD OUT_FD`. Jobs arrive as JSON lines on IN_FD; progress
and one result per job go out as JSON lines on OUT_FD. Before it touches CUDA, the worker imports torch and
Triton and forks its zygote (tools.sandbox), from which every candidate runs in a fresh, sandboxed process;
this process generates inputs, computes references, compares, times baselines and decides (tools.judge).
A candidate that hangs, crashes or loses its CUDA context costs its own process, not this one.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from tools.reports import HotspotsResult, Report, built

LOG_NAME = "worker_output.log"
FATAL_CUDA_MARKERS = ("illegal memory access", "illegal address", "device-side assert", "unspecified launch failure",
                      "misaligned address", "an illegal instruction", "CUDA error: launch failed",
                      "cudaErrorIllegalAddress", "context is destroyed", "CUDA_ERROR_ILLEGAL_ADDRESS")


def sandbox_root() -> Path:
    """The pool's sandbox folder (tools.pool.sandbox_dir), one subfolder per worker; outside MARATHON_HOME."""
    base = os.environ.get("MARATHON_SANDBOX_DIR")
    if base:
        return Path(base) / Path.cwd().name
    tag = hashlib.sha256(str(Path.cwd()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"marathon-sandbox-{os.geteuid()}" / tag


class Worker:
    def __init__(self, out: Any, sandbox: Any) -> None:
        import torch

        from tools import telemetry

        self.out = out
        self.torch = torch
        self.sandbox = sandbox
        self.cuda = os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available()
        self.device = "cuda" if self.cuda else "cpu"
        self.ceilings: dict[str, float] | None = None
        self.calibration: Any = None
        self.telemetry_before: Any = None
        # Baseline timings of this worker (tools.judge.timed_baseline): trusted code, re-timed when stale.
        self.baselines: dict[tuple[Any, ...], tuple[float, dict[str, Any]]] = {}
        # Calibrations of the timed reps' untimed work (tools.judge.plan_timing), made with no candidate alive.
        self.calibrations: dict[tuple[str, ...], Any] = {}  # tools.judge.HeldCalibration by problem, shape, l2
        # The last source's candidate process, kept for a repeat profile (tools.judge.park).
        self.parked: Any = None
        self.device_info = self._device_info(telemetry)

    def _device_info(self, telemetry: Any) -> dict[str, Any]:
        import triton

        torch = self.torch
        info: dict[str, Any] = {"kind": "cuda" if self.cuda else "cpu", "torch": torch.__version__,
                                "triton": triton.__version__, "python": platform.python_version()}
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            info.update(name=props.name, capability=f"{props.major}.{props.minor}",
                        sms=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 1),
                        driver=telemetry.driver_version(), cuda=torch.version.cuda)
            info["l2_mb"] = round(getattr(props, "L2_cache_size", 0) / 1e6, 1)
            # Which GPU of several alike: its uuid, and its index as this server's CUDA_VISIBLE_DEVICES names it.
            info["uuid"] = str(getattr(props, "uuid", "")) or None
            info["visible_device"] = os.environ.get("CUDA_VISIBLE_DEVICES")
        else:
            info.update(name="cpu (Triton interpreter)", interpreter=os.environ.get("TRITON_INTERPRET") == "1")
        return info

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message, default=str) + "\n")
        self.out.flush()

    def progress(self, stage: str, done: float | None = None, total: float | None = None) -> None:
        self.send({"type": "progress", "stage": stage, "done": done, "total": total})

    # -- jobs ---------------------------------------------------------------------------------------

    def handle(self, job: dict[str, Any]) -> dict[str, Any] | Report:
        """The job's answer: a typed report for the job tools (profile, baseline, hotspots), else a plain one."""
        from tools import telemetry

        op = job.get("op")
        if op == "ping":
            return {"ok": True, "device": self.device_info, "pid": os.getpid()}
        from tools.candidate import source_sha
        from tools.judge import release_parked

        # Whatever this job is, the process kept for a repeat profile lives on only if this is that profile.
        source = job.get("source")
        release_parked(self, keep_sha=source_sha(source) if op == "profile" and isinstance(source, str) else None)
        self.telemetry_before = telemetry.snapshot() if self.cuda else None
        if op == "profile":
            from tools.judge import run_profile

            return run_profile(self, job)
        if op == "baseline":
            from tools.baseline_job import run_baselines

            return run_baselines(self, job)
        if op == "census":
            from tools.census import run_census

            return run_census(self, job)
        if op == "ncu_metrics":
            from tools.ncu import ncu_metrics

            return ncu_metrics(job["problem"], job["source"], job.get("shape") or "bench")
        if op == "hotspots":
            from tools.hotspots import ncu_hotspots

            save = job.get("save_dir")
            shape = job.get("shape") or "bench"
            found = ncu_hotspots(job["problem"], job["source"], shape, top=int(job.get("top", 15)),
                                 save_dir=Path(save) if save else None)
            return built(HotspotsResult, {"problem": job["problem"], "shape": shape, **found})
        return {"ok": False, "error": f"unknown job op {op!r}", "error_class": "error"}

    def ensure_timer(self) -> Any:
        if self.calibration is None:
            from tools.timing import Calibration, measure_ceilings

            self.ceilings = measure_ceilings()
            self.calibration = Calibration()
        return self.calibration

    def context_is_broken(self, exc: BaseException) -> bool:
        text = f"{exc}"
        if any(marker in text for marker in FATAL_CUDA_MARKERS):
            return True
        if self.cuda:
            try:
                self.torch.cuda.synchronize()
            except Exception:
                return True
        return False


def _redirect_output() -> None:
    fd = os.open(LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _preload_for_candidates() -> None:
    """What every candidate process needs, imported once here so a fork has it (and no file read is needed
    after the sandbox closes): torch, Triton, the harness, the guard's dispatch machinery."""
    import torch
    import torch.utils._python_dispatch
    import triton
    import triton.language  # noqa: F401

    import kernels
    import tools.candidate_host  # noqa: F401

    kernels.list_problems()  # candidate processes generate their inputs from the judge's seeds
    from tools.candidate import gluon_jit_class

    gluon_jit_class()
    try:
        from triton.runtime.interpreter import InterpretedFunction  # noqa: F401
        from triton.runtime.jit import KernelInterface  # noqa: F401
    except ImportError:
        pass
    # The first op under a TorchDispatchMode imports torch._dynamo (2.2 s on a CI core, about 5 s on the H200's
    # host): every candidate's first guarded call paid it, more than most kernels' compiles. A CPU op under the
    # guard imports it here, once; nothing of CUDA is touched.
    from tools.guard import compute_guard

    with compute_guard():
        torch.empty(1).fill_(0)


def _die_with_the_server(sandbox: Any) -> None:
    """The pool starts each worker in a session of its own, so a kill of the server's process group does not
    reach it; a job may run for minutes. This thread notices the server is gone (the parent changed) and ends
    the worker, its zygote and the candidate with it, instead of letting a job run on beside a new server."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                sandbox.close()  # the zygote dies, and its candidates with it (PR_SET_PDEATHSIG)
                os._exit(4)

    threading.Thread(target=watch, daemon=True, name="server-watch").start()


def serve(in_fd: int, out_fd: int) -> int:
    out = os.fdopen(out_fd, "w", buffering=1)
    started = time.perf_counter()
    _redirect_output()
    try:
        from tools.sandbox import Sandbox

        _preload_for_candidates()
        sandbox = Sandbox(sandbox_root())  # forks the zygote: before CUDA is touched in this process
        worker = Worker(out, sandbox)
    except BaseException as exc:
        out.write(json.dumps({"type": "fatal", "error": f"worker failed to start: {exc!r}"}) + "\n")
        return 1
    _die_with_the_server(sandbox)
    worker.send({"type": "ready", "device": worker.device_info, "pid": os.getpid(),
                 "startup_s": round(time.perf_counter() - started, 3)})
    try:
        with os.fdopen(in_fd, "r") as reader:
            for line in reader:
                if not line.strip():
                    continue
                job = json.loads(line)
                fatal = False
                t0 = time.perf_counter()
                try:
                    answer = worker.handle(job)
                    result = answer.as_dict() if isinstance(answer, Report) else answer
                except BaseException as exc:  # a fault of the judge's own: still answer, then be replaced
                    from tools.sandbox import ZygoteLost

                    fatal = isinstance(exc, ZygoteLost) or worker.context_is_broken(exc)
                    result = {"ok": False, "error_class": "cuda_error" if fatal else "internal_error",
                              "error": f"{type(exc).__name__}: {exc}",
                              "internal": "".join(traceback.format_exception(exc))[-3000:]}
                fatal = fatal or bool(result.pop("_fatal", False))
                result["worker_s"] = round(time.perf_counter() - t0, 3)
                worker.send({"type": "result", "id": job.get("id"), "fatal": fatal, "result": result})
                if fatal:
                    return 3
    finally:
        sandbox.close()
    return 0


def main(argv: list[str]) -> int:
    return serve(int(argv[0]), int(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
