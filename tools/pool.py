"""Warm worker processes, one per GPU (or one on the CPU), each running one job at a time.

A job that hangs past its time limit, crashes the process, loses the CUDA context or is cancelled
costs a structured error and a fresh worker; the next job runs normally. Workers get a scrubbed
environment (no credentials) and a private working directory, and talk over their own pipes, so
nothing a candidate prints can corrupt the protocol.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.environment import project_root, scrubbed_env
from tools.reaped import trusted_python
from tools.sandbox import descendants

DEFAULT_JOB_TIMEOUT_S = float(os.environ.get("MARATHON_JOB_TIMEOUT", "600"))
STARTUP_TIMEOUT_S = 180.0
Progress = Callable[[dict[str, Any]], None]


def visible_gpus() -> list[int]:
    """GPU indices this process may use, without initialising CUDA here (NVML, else nvidia-smi)."""
    if os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return []
    count = 0
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
                count = sum(1 for line in out.splitlines() if line.startswith("GPU "))
            except Exception:
                count = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v for v in visible.split(",") if v.strip()]
        return list(range(min(len(ids), count) if count else len(ids)))
    return list(range(count))


def worker_env(gpu: int | None, root: Path) -> dict[str, str]:
    """A worker's environment: no credentials, the project importable, its own GPU or the interpreter.

    Triton's compile cache and its autotuning results live under the pool's root, so a restarted worker
    (after a crash, or the next CLI call) neither recompiles nor re-autotunes: FLA's chunk_kda baseline
    spends 84-101 s per new shape on its first call otherwise (BENCHMARKS.md).
    """
    env = scrubbed_env()
    env["PYTHONPATH"] = str(project_root()) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TRITON_CACHE_DIR", str(root / "triton-cache"))
    env.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    env["MARATHON_SANDBOX_DIR"] = str(sandbox_dir(root))
    if gpu is None:
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
        parent_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = parent_visible.split(",") if parent_visible else [str(i) for i in range(gpu + 1)]
        env["CUDA_VISIBLE_DEVICES"] = ids[gpu].strip()
    return env

def sandbox_dir(root: Path) -> Path:
    """Where this pool's candidate processes work: outside MARATHON_HOME (whose files a candidate must not even
    reach), one folder per pool root, removed when the pool closes."""
    import hashlib

    tag = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"marathon-sandbox-{os.geteuid()}" / tag


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class WorkerProcess:
    """One worker subprocess and its pipes."""

    def __init__(self, slot: int, gpu: int | None, root: Path) -> None:
        self.slot = slot
        self.gpu = gpu
        self.dir = root / f"worker{slot}"
        self.dir.mkdir(parents=True, exist_ok=True)
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        env = worker_env(gpu, root)
        self.proc = subprocess.Popen(
            trusted_python("tools.worker", str(to_child_r), str(from_child_w)),
            cwd=self.dir, env=env, pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._ready_lock = threading.Lock()
        self.ready: dict[str, Any] | None = None
        self.jobs_done = 0

    def send(self, message: dict[str, Any]) -> None:
        os.write(self._to_child, (json.dumps(message) + "\n").encode())

    def read_message(self, deadline: float, cancel: threading.Event | None) -> dict[str, Any] | str:
        """The next JSON message, or 'timeout', 'cancelled' or 'eof'."""
        while b"\n" not in self._buffer:
            if cancel is not None and cancel.is_set():
                return "cancelled"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            ready, _, _ = select.select([self._from_child], [], [], min(remaining, 0.25))
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    return "eof"
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> dict[str, Any]:
        with self._ready_lock:  # one reader of the pipe at a time
            return self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> dict[str, Any]:
        if self.ready is None:
            msg = self.read_message(time.monotonic() + timeout, None)
            if not isinstance(msg, dict) or msg.get("type") != "ready":
                raise RuntimeError(f"worker failed to start: {msg if isinstance(msg, str) else msg.get('error')}"
                                   f"; {self.exit_description()}")
            self.ready = msg
        return self.ready

    def exit_description(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with code {code}"

    def output_tail(self, limit: int = 2000) -> str:
        path = self.dir / "worker_output.log"
        try:
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - limit))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            # Every process below the worker, whatever session it moved to (a candidate's detached spinner would
            # otherwise outlive the zygote under init and slow every later baseline): stopped first, so none
            # forks while the tree is read, then killed.
            tree = descendants(self.proc.pid)
            for pid in tree:
                _signal(pid, signal.SIGSTOP)
            for pid in [*tree, self.proc.pid]:
                _signal(pid, signal.SIGKILL)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass


class WorkerPool:
    """Hands jobs to warm workers; one job per GPU at a time."""

    def __init__(self, gpus: list[int] | None = None, root: Path | None = None) -> None:
        self.gpus: list[int | None] = list(gpus if gpus is not None else visible_gpus()) or [None]
        self._own_root = root is None
        self.root = root or Path(tempfile.mkdtemp(prefix="marathon-workers-"))
        self._workers: list[WorkerProcess | None] = [None] * len(self.gpus)
        self._free = list(range(len(self.gpus)))
        self._cond = threading.Condition()
        self._spawn_lock = threading.Lock()
        self.restarts = 0

    @property
    def has_gpu(self) -> bool:
        return self.gpus != [None]

    def _worker(self, slot: int) -> WorkerProcess:
        with self._spawn_lock:  # warm() and run() may ask for the same slot at once
            w = self._workers[slot]
            if w is None or w.proc.poll() is not None:
                if w is not None:
                    w.kill()
                    self.restarts += 1
                w = WorkerProcess(slot, self.gpus[slot], self.root)
                self._workers[slot] = w
            return w

    def warm(self) -> dict[str, Any]:
        """Start every worker and wait until each has imported torch and triton."""
        infos = [self._worker(i).wait_ready() for i in range(len(self.gpus))]
        return infos[0]

    def run(self, job: dict[str, Any], *, timeout: float | None = None, progress: Progress | None = None,
            cancel: threading.Event | None = None) -> dict[str, Any]:
        """Run one job on a free worker; always returns a result dict (faults become results)."""
        timeout = timeout or DEFAULT_JOB_TIMEOUT_S
        with self._cond:
            while not self._free:
                self._cond.wait()
            slot = self._free.pop(0)
        try:
            return self._run_on(slot, job, timeout, progress, cancel)
        finally:
            with self._cond:
                self._free.append(slot)
                self._cond.notify()

    def _run_on(self, slot: int, job: dict[str, Any], timeout: float, progress: Progress | None,
                cancel: threading.Event | None) -> dict[str, Any]:
        started = time.monotonic()
        try:
            worker = self._worker(slot)
            worker.wait_ready()
        except Exception as exc:
            self._discard(slot)
            return {"ok": False, "error_class": "worker_error", "error": str(exc)}
        # The judge stops a candidate that overruns with time to spare to answer; the pool's own deadline below
        # is the backstop for a judge that does not answer at all.
        job = {**job, "id": f"{os.getpid()}-{time.time_ns()}", "deadline_s": max(5.0, timeout - 15.0)}
        try:
            worker.send(job)
        except OSError as exc:
            self._discard(slot)
            return {"ok": False, "error_class": "crashed", "error": f"worker unreachable: {exc}"}
        deadline = started + timeout
        while True:
            msg = worker.read_message(deadline, cancel)
            if isinstance(msg, dict) and msg.get("type") == "progress":
                if progress is not None:
                    progress(msg)
                continue
            if isinstance(msg, dict) and msg.get("type") == "result":
                if msg.get("id") != job["id"]:
                    continue  # not this job's answer (the worker is trusted; this only guards against our bugs)
                worker.jobs_done += 1
                result: dict[str, Any] = msg["result"]
                if msg.get("fatal"):
                    self._discard(slot)
                    result["worker_replaced"] = True
                return result
            return self._fault(slot, worker, msg, timeout, verdict=job.get("op") == "profile")

    def _fault(self, slot: int, worker: WorkerProcess, what: Any, timeout: float, verdict: bool) -> dict[str, Any]:
        """The job's answer when its worker gave none; `verdict`: a profile's, which also says it was not judged
        correct and has no timing (the fields only a profile report declares)."""
        tail = worker.output_tail()
        if what == "timeout":
            worker.kill()
            err = {"error_class": "timeout",
                   "error": f"the job took longer than {timeout:.0f} s (a hang?) and was stopped"}
        elif what == "cancelled":
            worker.kill()
            err = {"error_class": "cancelled", "error": "the job was cancelled and its worker stopped"}
        else:
            worker.proc.wait(timeout=10)
            err = {"error_class": "crashed",
                   "error": f"the worker running the candidate died ({worker.exit_description()})"}
        self._discard(slot)
        if not verdict:
            return {"ok": False, **err, "output_tail": tail, "worker_replaced": True}
        return {"ok": False, "correct": False, **err, "output_tail": tail, "worker_replaced": True,
                "timing": None, "speedup": None}

    def _discard(self, slot: int) -> None:
        w = self._workers[slot]
        if w is not None:
            w.kill()
            self._workers[slot] = None
            self.restarts += 1

    def close(self) -> None:
        for slot, w in enumerate(self._workers):
            if w is not None:
                w.kill()
                self._workers[slot] = None
        shutil.rmtree(sandbox_dir(self.root), ignore_errors=True)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
