"""The pure parts of the timer, on CPU: statistics and the L2 flush (GPU timing itself is marked gpu)."""

from __future__ import annotations

import pytest
import torch

from tools.timing import Timer, summarize


def test_summarize_median_and_iqr() -> None:
    s = summarize([10.0, 11.0, 12.0, 13.0, 14.0])
    assert s["median_us"] == 12.0 and s["min_us"] == 10.0 and s["reps"] == 5
    assert s["spread_pct"] == pytest.approx(100 * (13.0 - 11.0) / 12.0)


def test_summarize_single_sample() -> None:
    s = summarize([5.0])
    assert s["median_us"] == 5.0 and s["spread_pct"] == 0.0


@pytest.mark.parametrize("by_write", [False, True])
def test_flush_runs_and_reads_the_whole_buffer(by_write: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import tools.timing as timing

    monkeypatch.setattr(timing, "FLUSH_BY_WRITE", by_write)
    t = Timer(device="cpu", flush_bytes=4096)
    t._flush()
    if not by_write:
        assert int(t.flush_sink) == 1024, "the read flush sums every element"
    else:
        assert int(t.flush_buf.sum()) == 0


@pytest.mark.gpu
def test_interleaved_measure_on_gpu() -> None:
    x = torch.randn(1 << 24, device="cuda")
    t = Timer()
    stats = t.measure({"copy": lambda: x.clone(), "mul": lambda: x * 2}, graph=False, budget_s=0.2)
    assert stats["copy"]["median_us"] > 0 and stats["mul"]["reps"] == stats["copy"]["reps"]
    g = t.measure({"copy": lambda: x.clone()}, graph=True, budget_s=0.2)
    assert g["copy"]["mode"] == "cuda_graph"


@pytest.mark.parametrize(("gpu_us", "host_us", "graph"), [
    (20.0, 30.0, True),  # short: graph
    (198.0, 60.0, True),  # short, just under the threshold
    (570.0, 150.0, False),  # long and GPU-bound (KDA): eager
    (250.0, 210.0, True),  # long on the GPU, but launching it takes the host most of that: eager reps host-bound
    (float("nan"), 10.0, False),  # no usable pilot: eager, the safe default
    (400.0, None, False),  # an old pilot without host time
])
def test_auto_mode_takes_graph_for_short_or_host_bound_calls(gpu_us: float, host_us: float | None,
                                                             graph: bool) -> None:
    from tools.judge import takes_graph

    assert takes_graph(gpu_us, host_us) is graph


@pytest.mark.gpu
def test_raise_clocks_returns_once_the_clock_is_steady() -> None:
    from tools.timing import CLOCK_RAISE_MAX_S, raise_clocks

    took = raise_clocks()
    assert 0 < took < CLOCK_RAISE_MAX_S + 0.1
