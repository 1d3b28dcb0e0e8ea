"""Which lines of a Triton kernel the GPU waits on (Nsight Compute's warp-stall samples per source line), and,
without a GPU, which lines the compiler turned into shared-memory traffic, barriers and shuffles.

ncu samples, per SASS instruction, what each warp was stalled on. Triton keeps line information in the
cubins it builds, so `nvdisasm -gi` (shipped inside Triton) names the source line of every instruction
offset; joining the two gives the share of all samples, and the stall reasons, of each line of the
candidate. Lines inside Triton's own library (a `tl.sum`, a `tl.cumsum`, a sigmoid) keep their library
location and the library function's name, since Triton's line table does not say which call inlined them.

`instruction_mix()` is the static half: the SASS of each line by kind (what `compile --lines` reports), the
first place to look for layout conversions and cross-warp reductions before a GPU is at hand.

`ncu_hotspots()` runs the candidate under `ncu` (one profiled call of entry(), after warm-up) in a fresh
process that also writes the cubins of the kernels it launched; the rest of this module is plain
parsing that runs anywhere.
"""

from __future__ import annotations

import ast
import csv
import functools
import io
import re
import shutil
import subprocess
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.ncu_run import find_ncu, run_target
from tools.triton_bin import nvidia_binary

CANDIDATE_NAME = "candidate.py"
SAMPLES_COLUMN = "Warp Stall Sampling (All Samples)"
SHARED_COLUMN = "L1 Wavefronts Shared"
_LINE_RE = re.compile(r'//## File "([^"]+)", line (\d+)')
_OFFSET_RE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/")


@dataclass
class KernelSamples:
    """One kernel's rows of ncu's source page, keyed by instruction offset from the kernel's first."""

    name: str
    samples: dict[int, int] = field(default_factory=dict)
    stalls: dict[int, Counter[str]] = field(default_factory=dict)
    shared_wavefronts: dict[int, int] = field(default_factory=dict)


def parse_source_page(text: str) -> dict[str, KernelSamples]:
    """ncu `--page source --csv --print-source sass`: one block a profiled kernel (a "Kernel Name" row, a
    header row, one row an instruction). Blocks of the same kernel (several launches) are summed."""
    kernels: dict[str, KernelSamples] = {}
    current: KernelSamples | None = None
    header: dict[str, int] | None = None
    base = 0
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "Kernel Name":
            current = kernels.setdefault(row[1], KernelSamples(row[1]))
            header = None
            continue
        if current is None:
            continue
        if header is None:
            header = {name: i for i, name in enumerate(row)}
            base = -1
            continue
        try:
            address = int(row[0], 16)
        except ValueError:
            continue
        if base < 0:
            base = address
        offset = address - base

        def number(column: str, r: list[str] = row, h: dict[str, int] = header) -> int:
            i = h.get(column)
            return int(float(r[i].replace(",", ""))) if i is not None and r[i] not in ("", "-") else 0

        current.samples[offset] = current.samples.get(offset, 0) + number(SAMPLES_COLUMN)
        current.shared_wavefronts[offset] = current.shared_wavefronts.get(offset, 0) + number(SHARED_COLUMN)
        reasons = current.stalls.setdefault(offset, Counter())
        for column in header:
            if column.startswith("stall_") and "(Not Issued)" not in column:
                reasons[column.removeprefix("stall_")] += number(column)
    return kernels


def line_table(nvdisasm_output: str) -> dict[int, tuple[str, int]]:
    """Instruction offset -> (source file, line) from `nvdisasm -gi -c`: each `//## File` comment names
    the line of the instructions after it."""
    table: dict[int, tuple[str, int]] = {}
    where: tuple[str, int] | None = None
    for text in nvdisasm_output.splitlines():
        found = _LINE_RE.search(text)
        if found:
            where = (found.group(1), int(found.group(2)))
            continue
        offset = _OFFSET_RE.match(text)
        if offset and where is not None:
            table[int(offset.group(1), 16)] = where
    return table


def disassemble(cubin: Path) -> str:
    return subprocess.run([str(nvidia_binary("nvdisasm")), "-gi", "-c", str(cubin)], capture_output=True, text=True,
                          check=True).stdout


@functools.lru_cache(maxsize=64)
def _library_functions(path: str) -> list[tuple[int, int, str]]:
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError):
        return []
    return [(node.lineno, node.end_lineno or node.lineno, node.name) for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef)]


def _enclosing_function(path: str, line: int) -> str | None:
    spans = [(end - start, name) for start, end, name in _library_functions(path) if start <= line <= end]
    return min(spans)[1] if spans else None


def _source_line(path: str, line: int, cache: dict[str, list[str]]) -> str:
    if path not in cache:
        try:
            cache[path] = Path(path).read_text().splitlines()
        except OSError:
            cache[path] = []
    lines = cache[path]
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


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
        row.update(_location(path, line, Path(path).name == CANDIDATE_NAME, candidate_lines, cache))
        row["stalls_pct"] = _shares(reasons[(path, line)], samples, 3)
        rows.append(row)
    return {"kernel": kernel.name, "samples": total, "stalls_pct": _shares(overall, total, 6), "lines": rows}


def _location(path: str, line: int, is_candidate: bool, candidate_lines: list[str],
              cache: dict[str, list[str]]) -> dict[str, Any]:
    """Where a row's instructions come from: the candidate's line and text, or Triton's file:line, its
    enclosing function and text ("?" where the line table says nothing)."""
    if is_candidate:
        text = candidate_lines[line - 1].strip() if 0 < line <= len(candidate_lines) else ""
        return {"line": line, "library": None, "function": None, "text": text}
    if path == "?":
        return {"line": None, "library": "?", "function": None, "text": "(no line information)"}
    local = _local_library_file(path)
    return {"line": None, "library": f"{_short(path)}:{line}", "function": _enclosing_function(local, line),
            "text": _source_line(local, line, cache)}


def _local_library_file(path: str) -> str:
    """A Triton library path as recorded on the machine that compiled the kernel, read from this machine's
    Triton when the recorded file is not here (a report read offline; the same Triton version assumed)."""
    if Path(path).exists() or "triton" not in Path(path).parts:
        return path
    import triton

    parts = Path(path).parts
    return str(Path(triton.__file__).parent.joinpath(*parts[len(parts) - parts[::-1].index("triton"):]))


def _short(path: str) -> str:
    parts = Path(path).parts
    return "/".join(parts[parts.index("triton"):]) if "triton" in parts else Path(path).name


def _shares(counter: Counter[str], total: int, n: int) -> dict[str, float]:
    return {k: round(100.0 * v / total, 1) for k, v in counter.most_common(n) if v} if total else {}


# SASS opcodes by what they cost a kernel: shared memory (layout conversions, reductions, MMA operands),
# barriers, warp shuffles, tensor-core MMAs, global and spill (local) traffic, special-function (exp, rsqrt).
OP_KINDS: dict[str, frozenset[str]] = {
    "shared": frozenset({"STS", "LDS", "LDSM", "STSM", "ATOMS", "REDS"}),
    "barriers": frozenset({"BAR", "SYNCS", "WARPGROUP", "MEMBAR", "DEPBAR"}),
    "shuffles": frozenset({"SHFL"}),
    "mma": frozenset({"HGMMA", "QGMMA", "IGMMA", "HMMA", "IMMA"}),
    "global": frozenset({"LDG", "STG", "LDGSTS", "UTMALDG", "UTMASTG", "UBLKCP", "RED", "ATOMG"}),
    "local": frozenset({"LDL", "STL"}),
    "mufu": frozenset({"MUFU"}),
}
_OPCODE_RE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def instruction_mix(listing: str, candidate_file: str, candidate_source: str, top: int = 20) -> list[dict[str, Any]]:
    """The kernel's instructions by source line and kind, lines with the most instructions first.

    `listing` is `nvdisasm -gi -c` of the cubin; `candidate_file` the path the kernel was compiled from
    (its lines carry their text). Every instruction is counted once: the lines' `instructions` add up to
    the kernel's, with "?" for instructions the line table does not cover."""
    table = line_table(listing)
    per_line: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    for text in listing.splitlines():
        found = _OPCODE_RE.match(text)
        if not found:
            continue
        where = table.get(int(found.group(1), 16), ("?", 0))
        opcode = found.group(2)
        counts = per_line[where]
        counts["instructions"] += 1
        for kind, opcodes in OP_KINDS.items():
            if opcode in opcodes:
                counts[kind] += 1
    lines = candidate_source.splitlines()
    cache: dict[str, list[str]] = {}
    rows = []
    for (path, line), counts in sorted(per_line.items(), key=lambda item: -item[1]["instructions"])[:top]:
        row: dict[str, Any] = {"instructions": counts["instructions"], **{k: counts[k] for k in OP_KINDS}}
        row.update(_location(path, line, path == candidate_file, lines, cache))
        rows.append(row)
    return rows


def ncu_hotspots(problem: str, source: str, shape: str = "bench", top: int = 15, timeout: float = 600.0,
                 save_dir: Path | None = None) -> dict[str, Any]:
    """Run entry() once under ncu with source-level sampling and return each kernel's hotspots. With
    `save_dir`, ncu's report, its source page and the cubins are kept there to be read again offline."""
    ncu = find_ncu()
    if ncu is None:
        return {"ok": False, "error": "ncu (Nsight Compute) is not installed here"}
    with tempfile.TemporaryDirectory(prefix="marathon-hotspots-") as tmp:
        work = Path(tmp)
        cubins = work / "cubins"
        report = work / "report"
        try:
            # A fresh Triton cache: a cached cubin built from another file with the same kernel source would
            # carry that file's name in its line table, and its lines would not read as the candidate's.
            run = run_target(ncu, work, ["--section", "SourceCounters", "--section", "WarpStateStats", "-f", "-o",
                                         str(report)], timeout, problem, shape, source, CANDIDATE_NAME,
                             env={"TRITON_CACHE_DIR": str(work / "triton-cache")}, calls=1, cubin_dir=str(cubins))
            if run.returncode != 0 or not report.with_suffix(".ncu-rep").exists():
                return {"ok": False, "error": f"ncu exited with {run.returncode}: "
                                              f"{(run.stderr or run.stdout)[-1500:]}"}
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
