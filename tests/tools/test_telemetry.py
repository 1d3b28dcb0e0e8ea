"""tools.telemetry against a stand-in NVML: which GPU it reads, and the wait for a GPU to shed its heat before a
baseline is timed (a candidate that ran its last reps hot would otherwise slow the held baseline)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from tools import telemetry

SW_THERMAL, IDLE = 0x20, 0x1


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, reasons: list[int]) -> dict[str, Any]:
    """A pynvml whose throttle reasons are `reasons`, one a query (the last repeats); it records the handle asked."""
    seen: dict[str, Any] = {"queries": 0}

    def by_index(i: int) -> str:
        seen["handle"] = f"index {i}"
        return seen["handle"]

    def by_uuid(u: str) -> str:
        seen["handle"] = f"uuid {u}"
        return seen["handle"]

    def throttle(h: str) -> int:
        seen["queries"] += 1
        return reasons[min(seen["queries"] - 1, len(reasons) - 1)]

    nv = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=by_index,
                               nvmlDeviceGetHandleByUUID=by_uuid, nvmlDeviceGetCurrentClocksThrottleReasons=throttle)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return seen


def test_the_wait_ends_when_the_heat_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake_nvml(monkeypatch, [SW_THERMAL, SW_THERMAL, SW_THERMAL, IDLE])
    cooling = telemetry.wait_until_cool(5.0, poll_s=0.01)
    assert cooling.cleared is True and seen["queries"] == 4
    assert 0.02 <= cooling.waited_s < 5.0 and cooling.reasons_before == ["sw_thermal_slowdown"]


def test_a_gpu_that_stays_slowed_is_waited_for_at_most_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvml(monkeypatch, [SW_THERMAL])
    cooling = telemetry.wait_until_cool(0.1, poll_s=0.01)
    assert cooling.cleared is False and 0.1 <= cooling.waited_s < 1.0


def test_a_cool_gpu_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake_nvml(monkeypatch, [IDLE])
    cooling = telemetry.wait_until_cool(5.0, poll_s=0.01)
    assert cooling.cleared is True and cooling.waited_s < 0.05 and seen["queries"] == 1


def test_without_nvml_nothing_is_waited_for_and_nothing_claimed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert telemetry.wait_until_cool(5.0) == telemetry.Cooling(0.0, None, [])


@pytest.mark.parametrize(("visible", "handle"), [("5", "index 5"), ("GPU-1a2b", "uuid GPU-1a2b"), ("", "index 0"),
                                                 ("3,4", "index 3")])
def test_the_gpu_read_is_the_one_this_process_computes_on(monkeypatch: pytest.MonkeyPatch, visible: str,
                                                          handle: str) -> None:
    """NVML numbers every GPU of the machine; a pool's worker sees one, as CUDA_VISIBLE_DEVICES names it."""
    seen = _fake_nvml(monkeypatch, [IDLE])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    telemetry.wait_until_cool(1.0)
    assert seen["handle"] == handle
