"""A candidate run under Nsight Compute: finding `ncu`, starting the child that runs entry() under it, and
the cubins that child writes back.

Two profilers use it: tools.ncu (kernel times and throughputs) and tools.hotspots (warp-stall samples per
source line, which need the cubins' line tables). The child itself is `python -m tools.ncu TARGET.json`
(tools.ncu._target), which writes the cubins with `dump_cubins` when its target names a "cubin_dir". Kept
apart from both profilers so that each imports it at the top and neither imports the other; the kernel census
(tools.census) reads its reports with the same strict reader.

ncu prints its report on its own stdout, which the process it profiles inherits: candidate code there could print
rows of its own ahead of the real ones (a header, then its kernels under every ID, so the real rows read as
repeats). So each target points its stdout and stderr at a file of its own before any candidate code runs
(`detach_output`), and `report_rows` refuses a report with more than one header or with a kernel's rows apart.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tools.candidate import jit_functions
from tools.environment import project_root, scrubbed_env
from tools.reaped import run_reaped, trusted_python
from tools.written import read_written

TARGET_LOG = "target.log"  # in the target's folder: what it printed


class MalformedReport(ValueError):
    """ncu's CSV is not one report: a second header, or a kernel ID whose rows are not together."""


def report_rows(text: str) -> list[dict[str, str]]:
    """The rows of ncu's --csv report (one per kernel and metric), from its header on; ncu's own messages
    ("==PROF==", "==WARNING==") are not rows. Empty when nothing was profiled."""
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith('"ID",')]
    if not headers:
        return []
    if len(headers) > 1:
        raise MalformedReport(f"{len(headers)} header lines where ncu prints one")
    body = [line for line in lines[headers[0]:] if line.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(body))))
    seen: set[str] = set()
    last = None
    for row in rows:
        rid = row.get("ID")
        if rid is None or not rid.isdigit():
            raise MalformedReport(f"a row whose ID is {rid!r}")
        if rid != last:
            if rid in seen:
                raise MalformedReport(f"the rows of kernel ID {rid} are not together")
            seen.add(rid)
            last = rid
    return rows


def detach_output(log: Path) -> None:
    """Point this process's stdout and stderr (and every other descriptor of the same pipes) at `log`, before any
    candidate code runs: under ncu they are the profiler's stdout and stderr, which carry its report."""
    sys.stdout.flush()
    sys.stderr.flush()
    inherited = set()
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
            inherited.add((st.st_dev, st.st_ino))
        except OSError:
            pass
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2:
            continue
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in inherited:
            os.close(fd)


def target_output(work: Path, limit: int = 1500) -> str:
    """The last of what a target in `work` printed (its traceback, where it failed): see detach_output."""
    data = read_written(work / TARGET_LOG, limit, tail=True)
    return data.decode("utf-8", "replace") if data else ""


def find_ncu() -> str | None:
    for candidate in ("ncu", "/usr/local/cuda/bin/ncu"):
        path = shutil.which(candidate)
        if path:
            return path
    hits = sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu")) if Path("/opt/nvidia").exists() else []
    return str(hits[-1]) if hits else None


def run_target(ncu: str, work: Path, ncu_args: list[str], timeout: float, problem: str, shape: str, source: str,
               candidate_name: str = "candidate.py", env: dict[str, str] | None = None,
               **target: Any) -> subprocess.CompletedProcess[str]:
    """Run the candidate's entry() under ncu in a child process, in `work`: only the calls inside the NVTX range
    "profiled" are measured (tools.ncu._target), the clocks left as the machine has them. `target` adds to the
    child's instructions ("calls", "cubin_dir"); `env` to its scrubbed environment. Raises TimeoutExpired."""
    cand = work / candidate_name
    cand.write_text(source)
    spec = work / "target.json"
    spec.write_text(json.dumps({**target, "problem": problem, "shape": shape, "candidate": str(cand)}))
    cmd = [ncu, "--clock-control", "none", *ncu_args, "--nvtx", "--nvtx-include", "profiled/",
           *trusted_python("tools.ncu", str(spec))]
    # Under tools.reaped: nothing the candidate starts outlives the run (its time limit is the shim's).
    run_env = scrubbed_env({"PYTHONPATH": str(project_root()), "HOME": str(work), "TMPDIR": str(work),
                            "TRITON_CACHE_DIR": str(work / "triton-cache"), **(env or {})})
    return run_reaped(cmd, timeout, cwd=work, env=run_env)


def dump_cubins(module: Any, folder: Path) -> None:
    """Write the cubin of every kernel the module's Triton functions compiled, as <kernel name>.cubin."""
    folder.mkdir(parents=True, exist_ok=True)
    for fn in jit_functions(module):
        for kernel_cache, *_ in fn.device_caches.values():
            for compiled in kernel_cache.values():
                (folder / f"{compiled.name}.cubin").write_bytes(compiled.asm["cubin"])
