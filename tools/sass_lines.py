"""Which source line each SASS instruction of a Triton kernel came from, and the instruction mix per line.

Triton keeps line information in the cubins it builds, so `nvdisasm -gi` (shipped inside Triton) names the
source line of every instruction offset (`line_table()`). Lines inside Triton's own library (a `tl.sum`,
a `tl.cumsum`, a sigmoid) keep their library location and the library function's name, since Triton's
line table does not say which call inlined them (`source_location()`).

`instruction_mix()` is the static half of the hotspots: the SASS of each line by kind (what
`compile --lines` reports), the first place to look for layout conversions and cross-warp reductions
before a GPU is at hand. Plain parsing, but for running nvdisasm on a cubin (`disassemble()`).
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from tools.triton_bin import nvidia_binary
from tools.written import read_written

_LINE_RE = re.compile(r'//## File "([^"]+)", line (\d+)')
_OFFSET_RE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/")


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


DISASSEMBLE_TIMEOUT_S = 120.0
SOURCE_LIMIT_BYTES = 16 << 20  # a source file named by a line table


def disassemble(cubin: Path) -> str:
    return subprocess.run([str(nvidia_binary("nvdisasm")), "-gi", "-c", str(cubin)], capture_output=True, text=True,
                          check=True, timeout=DISASSEMBLE_TIMEOUT_S).stdout


def _read_source(path: str) -> str | None:
    """A source file a cubin's line table names (which a candidate's cubin chooses): a regular file only, within a
    limit, so that a name like /dev/zero or a FIFO cannot exhaust or stall the reader."""
    data = read_written(Path(path), SOURCE_LIMIT_BYTES)
    return data.decode("utf-8", "replace") if data is not None else None


@functools.lru_cache(maxsize=64)
def _library_functions(path: str) -> list[tuple[int, int, str]]:
    text = _read_source(path)
    try:
        tree = ast.parse(text or "")
    except (SyntaxError, ValueError):
        return []
    return [(node.lineno, node.end_lineno or node.lineno, node.name) for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef)]


def _enclosing_function(path: str, line: int) -> str | None:
    spans = [(end - start, name) for start, end, name in _library_functions(path) if start <= line <= end]
    return min(spans)[1] if spans else None


def _source_line(path: str, line: int, cache: dict[str, list[str]]) -> str:
    if path not in cache:
        cache[path] = (_read_source(path) or "").splitlines()
    lines = cache[path]
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def source_location(path: str, line: int, is_candidate: bool, candidate_lines: list[str],
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
        row.update(source_location(path, line, path == candidate_file, lines, cache))
        rows.append(row)
    return rows
