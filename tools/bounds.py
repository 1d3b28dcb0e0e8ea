"""Bounds the judge puts on timings it did not take itself (DESIGN.md §4; the verdict issue, guarantee 4).

Candidate code times itself (CUDA events must be recorded in the process that launches the kernels), so
its samples are claims. Two outside facts bound them:
- the physical floor: the problem's bytes at the measured DRAM ceiling and its flops at the measured matmul
  ceiling, each with a margin for a kernel that streams better than a device-to-device copy; a median below
  it is `impossible_timing`;
- the bracket: the judge's own wall clock around each batch of reps. The GPU is kept busy by the reps'
  copies and L2 flushes (their GPU time the judge measured in its own process), so
  wall = sum(samples) + reps x (fresh inputs + flush + stash copy) + a fixed latency per batch (measured
  on empty batches, at most the judge's own figure for them plus a margin), give or take noise. Samples that
  add up to much less than the wall left for them were under-reported (`timing_mismatch`); a wall much shorter
  than the copies and flushes alone means they were skipped.
Pure arithmetic: tests cover every branch without a GPU.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

# A kernel may stream better than a device-to-device copy (read-only traffic, no write-back), and a matmul
# on favourable data runs above the random-data rate: the floor uses ceilings 1.25x the measured ones.
CEILING_MARGIN = 1.25
# Bracket tolerances: what an honest batch shows beyond its samples, its calibrated overheads and its measured
# fixed latency (the request, the reply and the final synchronise, timed on empty batches of the same session):
# clock noise and the latency's own jitter, spread over the batch's reps.
LATENCY_JITTER_US = 300.0
PER_REP_SLACK_US = 4.0
RELATIVE_SLACK = 0.08
# The judge's calibration of a rep's untimed work runs in its own process, apart from the reps (before the
# candidate's process starts, so that it cannot inflate it): clocks and placement move it by a few percent of
# itself (an honest softmax at bench showed +5% on the H200, MLA at B = 1 +10% while its reps were host-bound).
OVERHEAD_SLACK = 0.04
# The flush or spin the judge adds to keep reps GPU-bound (its load, tools.timing.HOST_MARGIN) is a DRAM stream or an
# idle spin, not the mix of small launches that moves: it buys the allowance this share of itself only, so that a
# load does not widen the under-reporting nobody can see (at 4x OVERHEAD_SLACK's share would add 16 us a rep).
LOAD_SLACK = 0.01
# Under the CPU interpreter the reps are timed by the wall clock of a shared machine (a protocol test, never a
# figure): only gross under-reporting is meant to show there.
CPU_RELATIVE_SLACK = 0.5
MAX_LATENCY_US = 1500.0  # an empty batch slower than this is not believed (it would buy slack)
SKIPPED_SHARE = 0.5  # a rep whose wall is under half of its copies and flush did not do them


@dataclass(frozen=True)
class Floor:
    floor_us: float
    dram_us: float
    compute_us: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def physical_floor(nbytes: float, flops: float, ceilings: dict[str, float]) -> Floor | None:
    dram, mm = ceilings.get("dram_gbps"), ceilings.get("bf16_tflops")
    if not dram or not mm:
        return None
    dram_us = nbytes / (dram * CEILING_MARGIN * 1e9) * 1e6
    compute_us = flops / (mm * CEILING_MARGIN * 1e12) * 1e6
    return Floor(max(dram_us, compute_us), dram_us, compute_us)


@dataclass(frozen=True)
class BatchRecord:
    """One batch as the judge saw it: its wall time, and the samples the candidate process reported."""

    wall_us: float
    samples_us: list[float]


@dataclass(frozen=True)
class BracketVerdict:
    ok: bool
    reason: str | None
    unexplained_us_per_rep: float  # median over batches: wall left over per rep after samples and overheads
    allowed_us_per_rep: float
    overhead_us_per_rep: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_bracket(batches: list[BatchRecord], overhead_us_per_rep: float, latency_us: float,
                  relative_slack: float = RELATIVE_SLACK, load_added_us: float = 0.0) -> BracketVerdict:
    """Whether the reported samples account for the wall time the judge measured around each batch.

    `latency_us` is the median wall time of empty batches (nothing to run), which the judge has already capped at
    its own round trip plus a margin (tools.judge.TRUSTED_LATENCY_MARGIN_US), and which is capped here at
    MAX_LATENCY_US too: a candidate that answers empty batches slowly only makes its own bound tighter beyond that.
    `load_added_us` is the part of the overhead that the judge's load added (LOAD_SLACK)."""
    if not batches:
        return BracketVerdict(False, "no timed batch", 0.0, 0.0, overhead_us_per_rep)
    latency = min(max(latency_us, 0.0), MAX_LATENCY_US)
    per_rep: list[float] = []
    judged: list[float] = []  # the judge's own figure for a rep of each batch: its wall, less what is not the rep
    for b in batches:
        n = max(1, len(b.samples_us))
        per_rep.append((b.wall_us - latency - sum(b.samples_us)) / n - overhead_us_per_rep)
        judged.append((b.wall_us - latency) / n - overhead_us_per_rep)
    sizes = [len(b.samples_us) for b in batches]
    median_sample = statistics.median([s for b in batches for s in b.samples_us] or [0.0])
    typical_batch = max(1, int(statistics.median(sizes)))
    added = min(max(load_added_us, 0.0), overhead_us_per_rep)
    allowed = (relative_slack * median_sample + PER_REP_SLACK_US + OVERHEAD_SLACK * (overhead_us_per_rep - added)
               + LOAD_SLACK * added + LATENCY_JITTER_US / typical_batch)
    unexplained = statistics.median(per_rep)
    if any(s < 0 for b in batches for s in b.samples_us):
        return BracketVerdict(False, "negative samples were reported", unexplained, allowed, overhead_us_per_rep)
    # The median is what gets reported, so it is bound too: samples whose sum fits the wall can still put their
    # median anywhere (half of them tiny, the rest large), but not below the judge's own per-rep figure.
    below = statistics.median(judged) - median_sample
    if below > allowed:
        return BracketVerdict(
            False, f"the median sample is {below:.1f} us below what the batches' wall time gives a rep (at most "
            f"{allowed:.1f} us is noise): the samples do not describe the reps that ran",
            unexplained, allowed, overhead_us_per_rep)
    if unexplained > allowed:
        return BracketVerdict(
            False, f"the reps took {unexplained:.1f} us more each than their samples and overheads account for "
            f"(at most {allowed:.1f} us is noise): the samples under-report the time the reps ran",
            unexplained, allowed, overhead_us_per_rep)
    if unexplained < -SKIPPED_SHARE * overhead_us_per_rep - allowed:
        return BracketVerdict(
            False, f"the reps ran {-unexplained:.1f} us faster each than their input copies and L2 flushes alone "
            "take: the flushes or copies were skipped", unexplained, allowed, overhead_us_per_rep)
    return BracketVerdict(True, None, unexplained, allowed, overhead_us_per_rep)
