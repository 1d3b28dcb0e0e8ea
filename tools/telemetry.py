"""GPU state from NVML around a measurement, so a noisy number shows up as noisy."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

_THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
# The reasons that heat (or the board's own protection) slows the clocks by: what a GPU run hot leaves behind.
_HEAT_REASONS = 0x8 | 0x20 | 0x40


def _nvml() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def _handle(nv: Any, index: int | None) -> Any:
    """The NVML handle of GPU `index`, or of the one this process computes on: NVML counts every GPU of the
    machine, CUDA only those CUDA_VISIBLE_DEVICES shows (a pool's worker sees one, by index or uuid)."""
    if index is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if visible.startswith("GPU-"):
            return nv.nvmlDeviceGetHandleByUUID(visible)
        index = int(visible) if visible.isdigit() else 0
    return nv.nvmlDeviceGetHandleByIndex(index)


def _reasons(nv: Any, h: Any) -> int:
    return int(nv.nvmlDeviceGetCurrentClocksEventReasons(h) if hasattr(
        nv, "nvmlDeviceGetCurrentClocksEventReasons") else nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))


def snapshot(index: int | None = None) -> dict[str, Any] | None:
    """Clocks, temperature, power and throttle reasons of one GPU (this process's by default); None where NVML is
    absent."""
    nv = _nvml()
    if nv is None:
        return None
    try:
        h = _handle(nv, index)
        reasons = _reasons(nv, h)
        return {
            "sm_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            "max_sm_clock_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
            "temperature_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "power_limit_w": nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
            "throttle_reasons": [name for bit, name in _THROTTLE_REASONS.items() if reasons & bit],
        }
    except Exception as exc:  # NVML present but a query unsupported: say so, don't fail the profile
        return {"error": f"{type(exc).__name__}: {exc}"}


@dataclass(frozen=True)
class Cooling:
    """What waiting for a GPU to shed its heat came to: `cleared` None where NVML cannot say."""

    waited_s: float
    cleared: bool | None
    reasons_before: list[str]


def wait_until_cool(max_s: float, poll_s: float = 0.25, index: int | None = None) -> Cooling:
    """Wait while the GPU's clocks are held down by heat or a hardware slowdown, at most `max_s`.

    A candidate that runs the GPU hot in its last reps would otherwise slow the baseline timed after it, and with it
    the speedup of every candidate the held baseline serves for the next minutes."""
    nv = _nvml()
    if nv is None:
        return Cooling(0.0, None, [])
    try:
        h = _handle(nv, index)
        start = time.monotonic()
        first = _reasons(nv, h)
        reasons = first
        while reasons & _HEAT_REASONS and time.monotonic() - start < max_s:
            time.sleep(poll_s)
            reasons = _reasons(nv, h)
        return Cooling(round(time.monotonic() - start, 3), not reasons & _HEAT_REASONS,
                       [name for bit, name in _THROTTLE_REASONS.items() if first & bit])
    except Exception:
        return Cooling(0.0, None, [])


def driver_version() -> str | None:
    nv = _nvml()
    if nv is None:
        return None
    try:
        v = nv.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        return None
