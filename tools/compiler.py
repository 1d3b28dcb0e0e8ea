"""`compile`: guard, capture the launches, compile them for Hopper, report resources per kernel.

Works the same with or without a GPU: the launches are captured under the Triton interpreter and
compiled ahead of time for sm_90 (tools.capture, tools.aot), each step in its own subprocess so a
candidate that hangs or crashes the compiler costs a structured error, never the caller.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tools import guard
from tools.candidate import source_sha, write_candidate
from tools.environment import project_root, scrubbed_env
from tools.reaped import REAP_GRACE_S, TIMED_OUT, reaped, trusted_python
from tools.reports import CompileResult, UndeclaredFields, built
from tools.written import read_written, write_new

TARGET = "cuda:sm_90"
CAPTURE_TIMEOUT_S = 180.0
AOT_TIMEOUT_S = 300.0
PROGRESS_EVERY_S = 5.0
RESULT_LIMIT_BYTES = 256 << 20  # a step's result file (SASS and line tables included)


def _triton_version() -> str:
    try:
        from importlib.metadata import version

        return version("triton")
    except Exception:
        return "unknown"


# Bumped whenever what a report contains, or what the guard refuses, changes, so that no cached report of an
# older form is served (6: Gluon kernels and host-side TMA descriptors are compiled, not refused or failed;
# errors in jit helpers name their cause).
REPORT_VERSION = 6


def compile_cache_key(problem: str, shape: str, source: str, want_asm: bool, want_lines: bool = False) -> str:
    text = json.dumps([REPORT_VERSION, TARGET, _triton_version(), problem, shape, source_sha(source), want_asm,
                       want_lines])
    return hashlib.sha256(text.encode()).hexdigest()


def step_timeouts(total: float | None) -> tuple[float, float]:
    """The capture's and the AOT step's limits: the caller's total split 2:3, else MARATHON_JOB_TIMEOUT split
    alike, else the defaults."""
    if total is None and os.environ.get("MARATHON_JOB_TIMEOUT"):
        total = float(os.environ["MARATHON_JOB_TIMEOUT"])
    if total is None:
        return CAPTURE_TIMEOUT_S, AOT_TIMEOUT_S
    return max(1.0, total * 0.4), max(1.0, total * 0.6)


def _run_step(module: str, request: dict[str, Any], workdir: Path, timeout: float,
              interpret: bool, extra_env: dict[str, str] | None = None,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    req = workdir / f"{module.rsplit('.', 1)[-1]}_request.json"
    res = workdir / f"{module.rsplit('.', 1)[-1]}_result.json"
    # The folder is the one an earlier step ran candidate code in: it may have left links where these files go.
    write_new(req, json.dumps(request))
    if os.path.lexists(res):
        os.unlink(res)
    env = scrubbed_env()
    env["PYTHONPATH"] = str(project_root()) + os.pathsep + env.get("PYTHONPATH", "")
    # The step runs candidate code confined to `workdir` (tools.sandbox.confine): its caches live there too.
    env.update(HOME=str(workdir), TMPDIR=str(workdir), TRITON_CACHE_DIR=str(workdir / "triton-cache"))
    for name in ("MARATHON_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env.pop(name, None)
    env.update(extra_env or {})
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    step = module.rsplit(".", 1)[-1]
    started = time.monotonic()
    timed_out = {"ok": False, "error": {"message": f"{step} took longer than {timeout:.0f} s and was stopped (a "
                                                   "hang?)", "line": None, "error_class": "timeout"}}
    # Started outside the folder the previous step's candidate code wrote (it could have planted a `tools/` there,
    # which `-m` would import before the step confines itself), and under tools.reaped, which kills whatever the
    # step's candidate code left running once the step ends; the step moves into its folder itself.
    cmd = reaped(timeout, trusted_python(module, str(req), str(res)))
    with tempfile.TemporaryFile(dir=workdir) as err:
        proc = subprocess.Popen(cmd, cwd=project_root(), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        while True:
            try:
                proc.wait(timeout=PROGRESS_EVERY_S)
                break
            except subprocess.TimeoutExpired:
                waited = time.monotonic() - started
                if waited >= timeout + REAP_GRACE_S:  # the shim stops the step at `timeout`; this is its backstop
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return timed_out
                if progress is not None:
                    progress(f"compile: {step} running for {waited:.0f} s (limit {timeout:.0f} s)")
        if proc.returncode == TIMED_OUT:
            return timed_out
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    if not res.exists():
        tail = stderr[-2000:]
        return {"ok": False, "error": {"message": f"{step} process exited with code {proc.returncode} "
                                                  f"without a result: {tail}", "line": None,
                                       "error_class": "crashed"}}
    data = read_written(res, RESULT_LIMIT_BYTES)  # written by the step's process, where candidate code ran
    if data is None:
        return {"ok": False, "error": {"message": f"{step} process left no readable result (not a regular file, "
                                                  f"or over {RESULT_LIMIT_BYTES >> 20} MB)", "line": None,
                                       "error_class": "crashed"}}
    result: dict[str, Any] = json.loads(data)
    return result


def compile_candidate(problem: str, source: str, shape: str = "bench", *, want_asm: bool = False,
                      want_lines: bool = False, cache_dir: Path | None = None, timeout: float | None = None,
                      progress: Callable[[str], None] | None = None) -> CompileResult:
    """Compile every kernel `entry()` launches at `shape`, for sm_90. Never raises for candidate faults.

    want_lines: each kernel also reports `lines`, its instructions by source line and kind (shared memory,
    barriers, shuffles, MMAs, global, spills), compiled in a fresh Triton cache so that every line table
    names this candidate's file."""
    from kernels import get_problem

    started = time.perf_counter()
    prob = get_problem(problem)
    prob.dims(shape)  # a wrong shape name is the caller's error: KeyError with the valid names
    sha = source_sha(source)
    base: dict[str, Any] = {"problem": problem, "shape": shape, "target": TARGET, "source_sha": sha,
                            "triton": _triton_version()}
    key = compile_cache_key(problem, shape, source, want_asm, want_lines)
    cache_file = cache_dir / "compile" / f"{key}.json" if cache_dir else None
    cached = _cached(cache_file)
    if cached is not None:
        cached.cached, cached.elapsed_s = True, round(time.perf_counter() - started, 3)
        return cached

    violations = guard.static_check(source)
    if violations:
        syntax = any(v.message.startswith("SyntaxError") for v in violations)
        report = {**base, "ok": False, "kernels": [], "error_class": "syntax_error" if syntax else "rejected",
                  "errors": [v.to_dict() for v in violations]}
        return _finish(report, cache_file, started)

    capture_limit, aot_limit = step_timeouts(timeout)
    with tempfile.TemporaryDirectory(prefix="marathon-compile-") as tmp:
        workdir = Path(tmp)
        path = write_candidate(source, workdir)
        captured = _run_step("tools.capture", {"candidate_path": str(path), "problem": problem,
                                               "shape": shape}, workdir, capture_limit, interpret=True,
                            progress=progress)
        if not captured.get("ok"):
            err = captured["error"]
            report = {**base, "ok": False, "kernels": [], "error_class": err.get("error_class", "error"),
                      "errors": [{"message": err["message"], "line": err.get("line")}]}
            return _finish(report, cache_file if err.get("error_class") != "timeout" else None, started)
        compiled = _run_step("tools.aot", {"candidate_path": str(path), "launches": captured["launches"],
                                           "want_asm": want_asm, "want_lines": want_lines}, workdir, aot_limit,
                             interpret=False, progress=progress)
    if "error" in compiled:  # the step itself failed (timeout, crash)
        err = compiled["error"]
        report = {**base, "ok": False, "kernels": [], "error_class": err["error_class"],
                  "errors": [{"message": err["message"], "line": err.get("line")}]}
        return _finish(report, None, started)
    errors = [{"message": e["message"], "line": e.get("line"), **({"kernel": e["kernel"]} if "kernel" in e
                                                                  else {})} for e in compiled["errors"]]
    report = {**base, "ok": bool(compiled["ok"]), "kernels": compiled["kernels"], "errors": errors,
              "error_class": None if compiled["ok"] else "compile_error"}
    return _finish(report, cache_file, started)


def _cached(cache_file: Path | None) -> CompileResult | None:
    """The cached report, if there is one that still fits the schema (one that does not is compiled again)."""
    if cache_file is None or not cache_file.exists():
        return None
    try:
        return built(CompileResult, json.loads(cache_file.read_text()))
    except (OSError, ValueError):
        return None


def _finish(fields: dict[str, Any], cache_file: Path | None, started: float) -> CompileResult:
    """The report, typed (the schema check on what the capture and AOT steps sent back) and cached."""
    try:
        report = built(CompileResult, {**fields, "cached": False})
    except (ValidationError, UndeclaredFields) as exc:
        report = CompileResult.model_validate({
            **{k: fields[k] for k in ("problem", "shape", "target", "source_sha", "triton")}, "ok": False,
            "kernels": [], "error_class": "internal_error", "cached": False,
            "errors": [{"message": f"the compile report does not fit its schema: {exc}"[:2000], "line": None}]})
        cache_file = None
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(report.as_dict()))
        tmp.replace(cache_file)
    report.elapsed_s = round(time.perf_counter() - started, 3)
    return report
