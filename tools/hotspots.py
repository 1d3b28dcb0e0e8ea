"""Which lines of a Triton kernel the GPU waits on: Nsight Compute's warp-stall samples per source line.

ncu samples, per SASS instruction, what each warp was stalled on (its source page, read by
tools.ncu_source_page); nvdisasm's line table names the source line of every instruction offset
(tools.sass_lines). `hotspots()` joins the two: the share of all samples, and the stall reasons, of each
line of the candidate (library lines by their Triton file, line and function).

`ncu_hotspots()` runs the candidate under `ncu` (one profiled call of entry(), after warm-up) in a fresh
process that also writes the cubins of the kernels it launched, and joins each kernel's samples with its
cubin's line table. Without a GPU, tools.sass_lines.instruction_mix() is the static half.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from tools.ncu_run import find_ncu, run_target, target_output
from tools.ncu_source_page import KernelSamples, parse_source_page
from tools.sass_lines import disassemble, line_table, source_location
from tools.written import copy_written

CANDIDATE_NAME = "candidate.py"


def hotspots(kernel: KernelSamples, table: dict[int, tuple[str, int]], candidate_source: str,
             top: int = 15) -> dict[str, Any]:
    """The kernel's stall samples summed by source line, largest first. Candidate lines carry their text;
    library lines their file, line and enclosing function (e.g. `sum` for a tl.sum)."""
    total = sum(kernel.samples.values())
    per_line: Counter[tuple[str, int]] = Counter()
    reasons: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    shared: Counter[tuple[str, int]] = Counter()
    overall: Counter[str] = Counter()
    for offset, samples in kernel.samples.items():
        where = table.get(offset, ("?", 0))
        per_line[where] += samples
        reasons[where].update(kernel.stalls.get(offset, Counter()))
        shared[where] += kernel.shared_wavefronts.get(offset, 0)
        overall.update(kernel.stalls.get(offset, Counter()))
    candidate_lines = candidate_source.splitlines()
    cache: dict[str, list[str]] = {}
    rows = []
    for (path, line), samples in per_line.most_common(top):
        row: dict[str, Any] = {"share_pct": round(100.0 * samples / total, 2) if total else 0.0,
                               "samples": samples, "shared_wavefronts": shared[(path, line)]}
        row.update(source_location(path, line, Path(path).name == CANDIDATE_NAME, candidate_lines, cache))
        row["stalls_pct"] = _shares(reasons[(path, line)], samples, 3)
        rows.append(row)
    return {"kernel": kernel.name, "samples": total, "stalls_pct": _shares(overall, total, 6), "lines": rows}


def _shares(counter: Counter[str], total: int, n: int) -> dict[str, float]:
    return {k: round(100.0 * v / total, 1) for k, v in counter.most_common(n) if v} if total else {}


CUBINS_LIMIT_BYTES, CUBINS_MAX_FILES = 1 << 30, 256  # the cubins the target writes, copied out of its folder


def ncu_hotspots(problem: str, source: str, shape: str = "bench", top: int = 15, timeout: float = 600.0,
                 save_dir: Path | None = None) -> dict[str, Any]:
    """Run entry() once under ncu with source-level sampling and return each kernel's hotspots. With
    `save_dir`, ncu's report, its source page and the cubins are kept there to be read again offline."""
    ncu = find_ncu()
    if ncu is None:
        return {"ok": False, "error": "ncu (Nsight Compute) is not installed here"}
    with tempfile.TemporaryDirectory(prefix="marathon-hotspots-") as tmp:
        # The target writes only in `work`; ncu's report and the cubins read here live beside it, out of its reach
        # (a link it left where ncu writes its report would have ncu, unconfined, write through it).
        work = Path(tmp) / "target"
        work.mkdir()
        written = work / "cubins"
        cubins = Path(tmp) / "cubins"
        report = Path(tmp) / "report"
        try:
            # A fresh Triton cache: a cached cubin built from another file with the same kernel source would
            # carry that file's name in its line table, and its lines would not read as the candidate's.
            run = run_target(ncu, work, ["--section", "SourceCounters", "--section", "WarpStateStats", "-f", "-o",
                                         str(report)], timeout, problem, shape, source, CANDIDATE_NAME,
                             env={"TRITON_CACHE_DIR": str(work / "triton-cache")}, calls=1, cubin_dir=str(written))
            copy_written(written, cubins, limit_bytes=CUBINS_LIMIT_BYTES, max_files=CUBINS_MAX_FILES,
                         suffix=".cubin")
            if run.returncode != 0 or not report.with_suffix(".ncu-rep").exists():
                return {"ok": False, "error": f"ncu exited with {run.returncode}: "
                                              f"{(target_output(work) or run.stderr or run.stdout)[-1500:]}"}
            page = subprocess.run([ncu, "-i", str(report.with_suffix(".ncu-rep")), "--page", "source", "--csv",
                                   "--print-source", "sass"], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"ncu took longer than {timeout:.0f} s"}
        kernels = parse_source_page(page.stdout)
        if save_dir is not None:
            save_dir.mkdir(parents=True, exist_ok=True)
            (save_dir / "source_page.csv").write_text(page.stdout)
            (save_dir / CANDIDATE_NAME).write_text(source)
            shutil.copy(report.with_suffix(".ncu-rep"), save_dir / "report.ncu-rep")
            for cubin in cubins.glob("*.cubin"):
                shutil.copy(cubin, save_dir / cubin.name)
        if not kernels:
            return {"ok": False, "error": f"ncu's source page had no kernels: {page.stdout[:500]}{page.stderr[-500:]}"}
        out = []
        for name, samples in kernels.items():
            cubin = cubins / f"{name}.cubin"
            if not cubin.exists():
                out.append({"kernel": name, "error": "no cubin from this run (not a kernel of the candidate)"})
                continue
            out.append(hotspots(samples, line_table(disassemble(cubin)), source, top))
    return {"ok": True, "kernels": out}
