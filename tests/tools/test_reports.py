"""The typed job reports (tools.reports): what the log keeps of one, what crosses a pipe, what a client sees."""

from __future__ import annotations

from server.models import ProfileResult, published
from tools.reports import BaselineResult, HotspotsResult, Timing, received


def test_a_report_dumps_exactly_the_fields_set_by_the_work_and_the_service() -> None:
    report = ProfileResult.model_validate({"problem": "p", "shape": "bench", "ok": True, "timing": None,
                                           "verification": {"by": "judge:v1", "census": None}})
    report.speedup = None
    report.timing = Timing.model_validate({"median_us": 5.0, "l2": "cold"})
    assert report.as_dict() == {"problem": "p", "shape": "bench", "ok": True, "speedup": None,
                                "timing": {"median_us": 5.0, "l2": "cold"},
                                "verification": {"by": "judge:v1", "census": None}}


def test_what_comes_back_is_read_through_its_schema() -> None:
    fault = received(HotspotsResult, {"ok": False, "error": "hang", "error_class": "timeout"}, problem="p",
                     shape="bench")
    assert fault.as_dict() == {"problem": "p", "shape": "bench", "ok": False, "error": "hang",
                               "error_class": "timeout"}
    odd = received(BaselineResult, {"ok": True, "baselines": [], "seed": 7}, problem="p", shape="bench")
    assert odd.ok is False and odd.error_class == "internal_error" and odd.error is not None and "seed" in odd.error


def test_our_traceback_is_logged_but_neither_published_nor_in_the_schema() -> None:
    report = received(ProfileResult, {"ok": False, "error_class": "internal_error", "error": "boom",
                                      "internal": "Traceback ..."}, problem="p", shape="bench")
    assert report.as_dict()["internal"] == "Traceback ..."
    assert "internal" not in published(ProfileResult, report).model_dump(mode="json", by_alias=True)
    assert "internal" not in ProfileResult.model_json_schema(mode="serialization")["properties"]
