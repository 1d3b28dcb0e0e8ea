"""The warm worker process: runs candidate code for one GPU (or the CPU interpreter) and reports back.

Started by tools.pool as `python -m tools.worker IN_FD OUT_FD`. Jobs arrive as JSON lines on IN_FD;
progress and one result per job go out as JSON lines on OUT_FD. The candidate's own stdout and
stderr go to a size-limited file in the worker's private directory, never into the protocol. Imports
only the standard library, torch, triton and nvidia-ml-py (and the problem suite), so it starts in
the time torch takes and runs wherever torch does. After a fault that may have corrupted the CUDA
context (illegal address, device assert) the worker answers, then exits so the pool replaces it.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import secrets
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

OUTPUT_LIMIT_BYTES = 64 * 1024 * 1024
LOG_NAME = "candidate_output.log"
FATAL_CUDA_MARKERS = ("illegal memory access", "illegal address", "device-side assert", "unspecified launch failure",
                      "misaligned address", "an illegal instruction", "CUDA error: launch failed",
                      "cudaErrorIllegalAddress", "context is destroyed", "CUDA_ERROR_ILLEGAL_ADDRESS")


class Worker:
    def __init__(self, out: Any) -> None:
        import torch

        from tools import telemetry

        self.out = out
        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.device = "cuda" if self.cuda else "cpu"
        self.ceilings: dict[str, float] | None = None
        self.timer: Any = None
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
        else:
            info.update(name="cpu (Triton interpreter)", interpreter=os.environ.get("TRITON_INTERPRET") == "1")
        return info

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message, default=str) + "\n")
        self.out.flush()

    def progress(self, stage: str, done: float | None = None, total: float | None = None) -> None:
        self.send({"type": "progress", "stage": stage, "done": done, "total": total})

    # -- jobs ---------------------------------------------------------------------------------------

    def handle(self, job: dict[str, Any]) -> dict[str, Any]:
        op = job.get("op")
        if op == "ping":
            return {"ok": True, "device": self.device_info, "pid": os.getpid()}
        if op == "profile":
            from tools.profile_job import run_profile

            return run_profile(self, job)
        if op == "baseline":
            from tools.baseline_job import run_baselines

            return run_baselines(self, job)
        return {"ok": False, "error": f"unknown job op {op!r}", "error_class": "error"}

    def ensure_timer(self) -> Any:
        if self.timer is None:
            from tools.timing import Timer, measure_ceilings

            self.ceilings = measure_ceilings()
            self.timer = Timer()
        return self.timer

    def fresh_seed(self) -> int:
        return secrets.randbits(31)

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


def _output_tail(limit: int = 2000) -> dict[str, Any]:
    """What the candidate printed during the job (last `limit` bytes), then reset the file."""
    sys.stdout.flush()
    sys.stderr.flush()
    size = os.fstat(1).st_size
    with open(LOG_NAME, "rb") as f:
        f.seek(max(0, size - limit))
        tail = f.read().decode("utf-8", "replace")
    os.ftruncate(1, 0)
    os.lseek(1, 0, os.SEEK_SET)
    os.lseek(2, 0, os.SEEK_SET)
    return {"output_bytes": size, "output_tail": tail}


def _redirect_output() -> None:
    fd = os.open(LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # A candidate that prints without end hits the size limit and gets an error, not a full disk.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))


def serve(in_fd: int, out_fd: int, on_job: Callable[[dict[str, Any]], None] | None = None) -> int:
    out = os.fdopen(out_fd, "w", buffering=1)
    started = time.perf_counter()
    _redirect_output()
    try:
        worker = Worker(out)
    except BaseException as exc:
        out.write(json.dumps({"type": "fatal", "error": f"worker failed to start: {exc!r}"}) + "\n")
        return 1
    worker.send({"type": "ready", "device": worker.device_info, "pid": os.getpid(),
                 "startup_s": round(time.perf_counter() - started, 3)})
    with os.fdopen(in_fd, "r") as reader:
        for line in reader:
            if not line.strip():
                continue
            job = json.loads(line)
            fatal = False
            t0 = time.perf_counter()
            try:
                result = worker.handle(job)
            except BaseException as exc:  # a fault outside the per-candidate handling: still answer
                fatal = worker.context_is_broken(exc)
                result = {"ok": False, "error_class": "cuda_error" if fatal else "internal_error",
                          "error": f"{type(exc).__name__}: {exc}",
                          "internal": "".join(traceback.format_exception(exc))[-3000:]}
            fatal = fatal or bool(result.pop("_fatal", False))
            result.update(_output_tail())
            result["worker_s"] = round(time.perf_counter() - t0, 3)
            worker.send({"type": "result", "id": job.get("id"), "fatal": fatal, "result": result})
            if fatal:
                return 3
    return 0


def main(argv: list[str]) -> int:
    return serve(int(argv[0]), int(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
