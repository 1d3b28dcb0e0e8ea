"""The `baseline` tool's answers kept in the log: measured once per (problem, shape, GPU, versions), re-measured on
`refresh`, and the newest readable measurement is the one answered. A pool stands in for the GPU worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from server.service import Service
from state import EventLog


class BaselinePool:
    """Answers baseline jobs with a timed torch baseline, a new median each time, and counts them."""

    def __init__(self) -> None:
        self.runs = 0

    def warm(self) -> dict[str, Any]:
        return {"device": {"name": "test GPU", "driver": "1.0", "torch": "2.x", "triton": "3.6"}}

    def run(self, job: dict[str, Any], **_: Any) -> dict[str, Any]:
        assert job["op"] == "baseline"
        self.runs += 1
        timing = {"cuda_graph": {"median_us": 10.0 * self.runs, "reps": 30}}
        return {"problem": job["problem"], "shape": job["shape"], "ok": True,
                "baselines": [{"name": "torch", "available": True, "correct": True, "timing": timing}]}

    def close(self) -> None:
        pass


def median(report: Any) -> float:
    return report.baselines[0].timing["cuda_graph"]["median_us"]


def service_at(tmp_path: Path, pool: BaselinePool) -> Service:
    return Service(log=EventLog(tmp_path / "marathon.db"), pool=pool,  # type: ignore[arg-type]
                   cache_dir=tmp_path / "cache")


def test_a_baseline_is_measured_once_and_a_refresh_supersedes_it(tmp_path: Path) -> None:
    pool = BaselinePool()
    service = service_at(tmp_path, pool)
    try:
        first = service.baseline("softmax")
        again = service.baseline("softmax")
        refreshed = service.baseline("softmax", refresh=True)
        after = service.baseline("softmax")
    finally:
        service.close()
    assert pool.runs == 2
    assert first.cached is False and median(first) == 10.0
    assert again.cached is True and median(again) == 10.0
    assert refreshed.cached is False and median(refreshed) == 20.0
    assert after.cached is True and median(after) == 20.0  # the refresh, not the first measurement
    assert after.cached_event_id is not None and again.cached_event_id is not None
    assert after.cached_event_id > again.cached_event_id


def test_an_entry_the_schema_no_longer_reads_is_replaced_once(tmp_path: Path) -> None:
    pool = BaselinePool()
    probe = service_at(tmp_path / "probe", pool)
    try:
        probe.baseline("softmax")
        key = probe.log.events(kinds="baseline")[0].key
    finally:
        probe.close()
    assert key is not None and key.startswith("baseline:")
    log = EventLog(tmp_path / "marathon.db")
    stale = {"problem": "softmax", "shape": "bench", "results": {"problem": "softmax", "shape": "bench", "ok": True,
                                                                 "baselines": [{"name": "torch", "timing": "old"}]}}
    log.append("baseline", stale, key=key)
    log.close()
    pool.runs = 0
    service = service_at(tmp_path, pool)
    try:
        reports = [service.baseline("softmax") for _ in range(3)]
    finally:
        service.close()
    assert pool.runs == 1  # measured again once, not on every call
    assert [r.cached for r in reports] == [False, True, True]
