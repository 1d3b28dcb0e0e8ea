"""Nsight Compute's source page, parsed: per SASS instruction of each profiled kernel, its warp-stall samples.

ncu samples, per SASS instruction, what each warp was stalled on; `ncu -i REPORT --page source --csv
--print-source sass` prints them, one block a kernel. `parse_source_page()` reads that CSV into one
`KernelSamples` a kernel, keyed by instruction offset from the kernel's first instruction, which is how
nvdisasm's line table (tools.sass_lines) names them. Plain parsing: it runs anywhere.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import dataclass, field

SAMPLES_COLUMN = "Warp Stall Sampling (All Samples)"
SHARED_COLUMN = "L1 Wavefronts Shared"


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
