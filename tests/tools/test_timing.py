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


def test_the_judge_loads_a_rep_until_its_gpu_work_stays_ahead_of_the_host() -> None:
    """A rep whose untimed work the host queues in more than 1/HOST_MARGIN of its GPU time gets a doubled flush
    (or spin) until it does not, up to MAX_LOAD; the overhead kept is the one measured at the load chosen."""
    from tools.judge import settle_load
    from tools.timing import HOST_MARGIN, MAX_LOAD, RepOverhead

    asked: list[int] = []

    def runs_at(gpu_per_load: float, host: float):
        def runs(load: int) -> dict[bool, list[RepOverhead]]:
            asked.append(load)
            queued = gpu_per_load * load
            return {g: [RepOverhead(queued + 5.0, queued, host), RepOverhead(queued + 7.0, queued, host)]
                    for g in (False, True)}
        return runs

    # 400 us of GPU against 300 us of host: 1.3x, below the margin; at load 2 (800 against 300) it holds.
    assert 400 < HOST_MARGIN * 300 <= 800
    settled = settle_load(runs_at(400.0, 300.0))
    assert (settled.load, asked, settled.gpu_ahead) == (2, [1, 2], True)
    assert settled.overhead_us == {False: 806.0, True: 806.0}
    assert settled.load_added_us == {False: 400.0, True: 400.0}  # beyond load 1's 406 us: a DRAM stream
    asked.clear()
    assert settle_load(runs_at(1000.0, 100.0)).load == 1 and asked == [1]
    asked.clear()
    settled = settle_load(runs_at(10.0, 1000.0))  # never ahead: bounded, not endless, and said
    assert settled.load == MAX_LOAD and asked[-1] == MAX_LOAD and settled.gpu_ahead is False
    # Off a GPU there is no queue (WallCalibration's host_us is 0): no load.
    assert settle_load(runs_at(0.0, 0.0)).load == 1


def test_one_disturbed_calibration_run_does_not_raise_the_load_but_a_host_heavy_mode_does() -> None:
    """Noise only lengthens a run (a context switch, a page fault): each side is read at its least over the runs."""
    from tools.judge import settle_load
    from tools.timing import RepOverhead

    steady = [RepOverhead(1000.0, 1000.0, 90.0)] * 2

    def disturbed(load: int) -> dict[bool, list[RepOverhead]]:
        return {False: steady, True: [RepOverhead(1000.0, 1000.0, 90.0), RepOverhead(1000.0, 1000.0, 900.0)]}

    assert settle_load(disturbed).load == 1

    def graph_mode_host_heavy(load: int) -> dict[bool, list[RepOverhead]]:
        heavy = [RepOverhead(300.0 * load, 300.0 * load, 200.0)] * 2
        return {False: steady, True: heavy}

    settled = settle_load(graph_mode_host_heavy)
    assert settled.load == 2 and settled.overhead_us[True] == 600.0 and settled.overhead_us[False] == 1000.0


@pytest.mark.gpu
def test_a_loaded_calibration_flushes_more_and_reports_the_hosts_time() -> None:
    from tools.timing import L2_REGIMES, Calibration

    base = Calibration("cold")
    loaded = base.in_regime("cold", 2)
    assert loaded is base.in_regime("cold", 2) and loaded.flush_bytes == 2 * L2_REGIMES["cold"][0]
    assert base.in_regime("warm", 2).spin_cycles == 2 * L2_REGIMES["warm"][1]
    x = torch.randn(1 << 20, device="cuda")
    specs = [((1 << 20,), torch.float32)]
    light = base.overhead_us(lambda b, i, key: b[0].normal_(), [x], specs, slots=4, graph=False)
    heavy = loaded.overhead_us(lambda b, i, key: b[0].normal_(), [x], specs, slots=4, graph=False)
    assert light.host_us > 0 and heavy.queued_us > 1.5 * light.queued_us
