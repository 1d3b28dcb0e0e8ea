"""A candidate run under Nsight Compute: finding `ncu`, starting the child that runs entry() under it, and
the cubins that child writes back.

Two profilers use it: tools.ncu (kernel times and throughputs) and tools.hotspots (warp-stall samples per
source line, which need the cubins' line tables). The child itself is `python -m tools.ncu TARGET.json`
(tools.ncu._target), which writes the cubins with `dump_cubins` when its target names a "cubin_dir". Kept
apart from both profilers so that each imports it at the top and neither imports the other.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tools.candidate import jit_functions
from tools.environment import project_root, scrubbed_env


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
           sys.executable, "-m", "tools.ncu", str(spec)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=work,
                          env=scrubbed_env({"PYTHONPATH": str(project_root()), "HOME": str(work), "TMPDIR": str(work),
                                            "TRITON_CACHE_DIR": str(work / "triton-cache"), **(env or {})}))


def dump_cubins(module: Any, folder: Path) -> None:
    """Write the cubin of every kernel the module's Triton functions compiled, as <kernel name>.cubin."""
    folder.mkdir(parents=True, exist_ok=True)
    for fn in jit_functions(module):
        for kernel_cache, *_ in fn.device_caches.values():
            for compiled in kernel_cache.values():
                (folder / f"{compiled.name}.cubin").write_bytes(compiled.asm["cubin"])
