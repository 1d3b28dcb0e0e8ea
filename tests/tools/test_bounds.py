"""The judge's outside bounds on timings it did not take: the physical floor and the bracket."""

from __future__ import annotations

import pytest

from tools import bounds
from tools.bounds import BatchRecord, check_bracket, physical_floor

CEILINGS = {"dram_gbps": 4000.0, "bf16_tflops": 800.0}


def test_floor_is_the_larger_of_bytes_and_flops_with_the_margin() -> None:
    f = physical_floor(10e6, 1e9, CEILINGS)
    assert f is not None
    assert abs(f.dram_us - 10e6 / (4000e9 * bounds.CEILING_MARGIN) * 1e6) < 1e-9
    assert f.floor_us == max(f.dram_us, f.compute_us)
    assert physical_floor(1.0, 1.0, {}) is None


def honest(samples: float, overhead: float, n: int, latency: float = 150.0) -> BatchRecord:
    return BatchRecord(wall_us=n * (samples + overhead) + latency, samples_us=[samples] * n)


def test_an_honest_batch_passes() -> None:
    v = check_bracket([honest(15.0, 80.0, 64) for _ in range(8)], overhead_us_per_rep=80.0, latency_us=150.0)
    assert v.ok, v.reason
    assert 0 <= v.unexplained_us_per_rep <= v.allowed_us_per_rep


def test_samples_reported_at_a_hundredth_are_caught() -> None:
    batches = [BatchRecord(b.wall_us, [s / 100 for s in b.samples_us]) for b in [honest(300.0, 80.0, 16)] * 4]
    v = check_bracket(batches, overhead_us_per_rep=80.0, latency_us=150.0)
    assert not v.ok and ("under-report" in (v.reason or "") or "median" in (v.reason or ""))


def test_halved_samples_of_a_small_kernel_are_caught() -> None:
    batches = [BatchRecord(b.wall_us, [s / 2 for s in b.samples_us]) for b in [honest(20.0, 80.0, 256)] * 4]
    v = check_bracket(batches, overhead_us_per_rep=80.0, latency_us=150.0)
    assert not v.ok


def test_skipped_flushes_are_caught() -> None:
    # The wall holds the samples but not the flushes and copies the judge measured for each rep.
    batches = [BatchRecord(wall_us=64 * 15.0 + 100, samples_us=[15.0] * 64)] * 4
    v = check_bracket(batches, overhead_us_per_rep=80.0, latency_us=150.0)
    assert not v.ok and "skipped" in (v.reason or "")


def test_negative_or_missing_samples_fail() -> None:
    assert not check_bracket([], 10.0, 0.0).ok
    assert not check_bracket([BatchRecord(100.0, [-1.0, 5.0])], 10.0, 0.0).ok


def test_a_slow_answer_to_empty_batches_buys_no_more_than_the_cap() -> None:
    """A candidate that stalls its empty batches to inflate the latency estimate gains at most the cap."""
    batches = [BatchRecord(b.wall_us + 20000, [s / 3 for s in b.samples_us]) for b in [honest(60.0, 80.0, 32)] * 4]
    v = check_bracket(batches, overhead_us_per_rep=80.0, latency_us=1e9)
    assert not v.ok


def test_a_median_pushed_down_while_the_sum_still_fits_is_caught() -> None:
    """Half the samples at the floor and the rest large enough that their sum accounts for the wall."""
    forged = []
    for b in [honest(100.0, 80.0, 64)] * 4:
        n = len(b.samples_us)
        low, high = 52.0, (sum(b.samples_us) - 52.0 * (n // 2 + 1)) / (n - n // 2 - 1)
        forged.append(BatchRecord(b.wall_us, [low] * (n // 2 + 1) + [high] * (n - n // 2 - 1)))
    assert abs(sum(forged[0].samples_us) - sum(honest(100.0, 80.0, 64).samples_us)) < 1e-6
    v = check_bracket(forged, overhead_us_per_rep=80.0, latency_us=150.0)
    assert not v.ok and "median" in (v.reason or "")


def test_the_flush_a_load_adds_widens_the_allowance_by_its_own_small_share_only() -> None:
    """MLA at B = 1 at load 4: 238 us of untimed work a rep at load 1, 643 us at 4. A 25 us kernel reporting 2 us
    samples is refused; the full overhead's 4% would have let it through (31 us allowed against 23 hidden)."""
    true_us, overhead, added = 25.0, 643.0, 405.0
    batches = [BatchRecord(b.wall_us, [2.0] * len(b.samples_us)) for b in [honest(true_us, overhead, 256)] * 8]
    assert check_bracket(batches, overhead, 150.0).ok  # the slack the load would otherwise buy
    v = check_bracket(batches, overhead, 150.0, load_added_us=added)
    assert not v.ok and "median sample" in (v.reason or "")
    assert v.allowed_us_per_rep == pytest.approx(check_bracket(batches, overhead - added, 150.0).allowed_us_per_rep
                                                 + bounds.LOAD_SLACK * added)
    assert check_bracket([honest(true_us, overhead, 256)] * 8, overhead, 150.0, load_added_us=added).ok
