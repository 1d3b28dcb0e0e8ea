"""What the service does with the kernel census's answer (tools.census) for a verified timing about to become a
best: a pass adds to the verification, a refusal or durations the median cannot stand next to take the verdict
back, and the attempt in the log says so. A pool stands in for the GPU worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from server.service import Service
from state import EventLog
from tests.server.common import STARTER


class CensusPool:
    def __init__(self, census: dict[str, Any]) -> None:
        self.census = census

    def warm(self) -> dict[str, Any]:
        return {"device": {"name": "test GPU"}}

    def run(self, job: dict[str, Any], **_: Any) -> dict[str, Any]:
        if job["op"] == "census":
            return {k: v for k, v in self.census.items() if k != "median_us"}
        median = self.census.get("median_us", 5.0)  # the profile's, where a case sets it
        return {"problem": job["problem"], "shape": job["shape"], "ok": True, "correct": True, "verified": True,
                "max_rel_err": 0.0, "timing": {"median_us": median, "mode": "cuda_graph", "reps": 30, "l2": "cold"},
                "device": {"name": "test GPU"}, "baseline": {"name": "torch", "median_us": 10.0, "l2": "cold"},
                "speedup": 2.0, "verification": {"by": "judge:v1+bounds", "census": None}}

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("census", "verified", "error_class"), [
    ({"status": "passed", "kernel_us_per_call": 5.2}, True, None),
    ({"status": "passed", "kernel_us_per_call": 50.0}, False, "census_failed"),  # 5 us median, 50 us of kernels
    # 5 us median beside 0.05 us of kernels: within a call's and a launch's allowance, so believed...
    ({"status": "passed", "kernel_us_per_call": 0.05, "calls": 2, "kernels": [{"name": "k", "launches": 2}]},
     True, None),
    # ...where 400 us of median beside a 2 us kernel is not: the work ran elsewhere under the census.
    ({"status": "passed", "kernel_us_per_call": 2.0, "calls": 2, "kernels": [{"name": "k", "launches": 2}],
      "median_us": 400.0}, False, "census_failed"),
    ({"status": "refused", "reason": "torch ran aten::mm"}, False, "census_failed"),
    ({"status": "unavailable", "reason": "no ncu"}, False, None),  # correct and timed, not verified
    ({"status": "unprofiled", "reason": "ERR_NVGPUCTRPERM"}, False, None),  # ncu there, but it profiled nothing
])
def test_the_census_answer_decides_the_verdict(tmp_path: Path, census: dict[str, Any], verified: bool,
                                               error_class: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MARATHON_CENSUS_OPTIONAL", raising=False)
    service = Service(log=EventLog(tmp_path / "marathon.db"), pool=CensusPool(census),  # type: ignore[arg-type]
                      cache_dir=tmp_path / "cache")
    try:
        report = service.profile("softmax", STARTER)
        attempt = service.attempts(problem="softmax")[0]
        best = service.best("softmax")
    finally:
        service.close()
    assert report.verified is verified and report.error_class == error_class
    assert report.verification is not None and report.verification["census"]["status"] == census["status"]
    assert attempt["verified"] is verified and attempt["error_class"] == error_class
    if error_class is None:
        assert report.ok and report.speedup == 2.0
        assert report.verification["by"].endswith("+census") is (census["status"] == "passed")
        if verified:
            assert best is not None and best["id"] == report.attempt_id
        else:
            assert best is None and "no kernel census" in report.verification["note"]
    else:
        assert not report.ok and report.correct is False and report.speedup is None
        assert report.error is not None and report.error.startswith("kernel census: ")
        assert best is None


def test_an_operator_may_waive_the_census_where_ncu_cannot_run(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARATHON_CENSUS_OPTIONAL", "1")
    for status, waived in (("unavailable", True), ("unprofiled", False)):  # a GPU without ncu; ncu that failed
        service = Service(log=EventLog(tmp_path / f"{status}.db"),  # type: ignore[arg-type]
                          pool=CensusPool({"status": status, "reason": "no ncu"}), cache_dir=tmp_path / "cache")
        try:
            report = service.profile("softmax", STARTER)
            best = service.best("softmax")
        finally:
            service.close()
        assert report.verified is waived and report.verification is not None
        if waived:
            assert report.verification["census"]["waived"] is True
            assert best is not None and best["id"] == report.attempt_id
        else:
            assert best is None and report.correct is True
