"""The timed protocol, run on the CPU: rotated inputs, reps checked after they ran, the bracket around batches.

Under the interpreter the judge can run its timed reps by the wall clock (`cpu_timing`), which measures no kernel
but exercises every step a GPU profile takes between the judge and the candidate's process, so the cheats
that target that protocol are caught here in CI, not only on an H200.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernels import starter_path
from tools.judge import TRUSTED_LATENCY_MARGIN_US

STARTER = starter_path("softmax").read_text()
Profile = Callable[[str], dict[str, Any]]  # conftest.cpu_timed
RETURN = "    return out\n"




def test_an_honest_kernel_is_timed_with_every_rep_checked(cpu_timed: Profile) -> None:
    r = cpu_timed(STARTER)
    assert r["correct"] is True and r["verified"] is False, (r["error_class"], r["error"])  # never verified on a CPU
    assert r["timing"]["mode"] == "cpu_wall_clock" and r["timing"]["reps"] == 30
    bounds = r["verification"]["bounds"]
    assert bounds["bracket"]["ok"] and bounds["checked_reps"] == r["timing"]["reps"]
    bracket = bounds["bracket"]
    assert 0 < bracket["batch_latency_trusted_us"] and bracket["batch_latency_us"] == min(
        bracket["batch_latency_measured_us"], bracket["batch_latency_trusted_us"] + TRUSTED_LATENCY_MARGIN_US)
    # The process's own share of an empty batch's round trip (its word, for diagnosis): inside the round trip.
    assert 0 < bracket["batch_latency_host_us"] < bracket["batch_latency_measured_us"]


# Every empty batch answered 50 ms late: they are the only batches the candidate's process can tell apart, and their
# median is the latency the bracket subtracts from every batch, so each would buy the samples that much slack.
STALL_EMPTY_BATCHES = '''
import torch as _torch

_Host = _torch.sys.modules["tools.candidate_host"].Host
_time = _torch.sys.modules["time"]
_batch = _Host.batch


def _stalled(self, msg):
    if not msg.header.get("seeds"):
        _time.sleep(0.05)
    return _batch(self, msg)


_Host.batch = _stalled
'''


def test_empty_batches_answered_late_buy_no_more_than_the_judges_own_latency(cpu_timed: Profile) -> None:
    r = cpu_timed(STALL_EMPTY_BATCHES + STARTER)
    bracket = r["verification"]["bounds"]["bracket"]
    assert bracket["batch_latency_measured_us"] > 50_000
    assert bracket["batch_latency_trusted_us"] < 50_000
    assert bracket["batch_latency_us"] <= bracket["batch_latency_trusted_us"] + TRUSTED_LATENCY_MARGIN_US


def test_honest_until_the_timed_reps_then_cached_is_caught_at_a_timed_rep(cpu_timed: Profile) -> None:
    """Honest for the checks (and the warm-up), then it returns its last output: a rep with new inputs shows it."""
    src = STARTER.replace("def entry(", "_SEEN = []\n\n\ndef entry(", 1)
    src = src.replace(RETURN, "    _SEEN.append(out)\n    return out\n", 1)
    src = src.replace("    rows, cols = x.shape\n", "    if len(_SEEN) >= 7:\n        return _SEEN[-1]\n"
                      "    rows, cols = x.shape\n", 1)
    assert src.count("_SEEN") == 4
    r = cpu_timed(src)
    assert r["correct"] is False and r["error_class"] == "incorrect", r
    assert "timed rep" in r["error"]


PATCH_EVENTS = '''
import torch as _torch

_host = _torch.sys.modules["tools.candidate_host"]
_elapsed = _host.WallEvent.elapsed_time
_host.WallEvent.elapsed_time = lambda self, end: _elapsed(self, end) / 100
'''


def test_samples_patched_to_a_hundredth_are_refused_by_the_bracket(cpu_timed: Profile) -> None:
    r = cpu_timed(PATCH_EVENTS + STARTER)
    assert r["correct"] is False and r["error_class"] == "timing_mismatch", r


PATCH_MEDIAN = '''
import torch as _torch

_Host = _torch.sys.modules["tools.candidate_host"].Host
_batch = _Host.batch


def _forged(self, msg):
    answer = _batch(self, msg)
    us = answer.get("us") or []
    if len(us) > 2:
        half, total = len(us) // 2 + 1, sum(us)
        low = min(us) / 10
        us = [low] * half + [(total - low * half) / (len(us) - half)] * (len(us) - half)
        answer["us"] = us
    return answer


_Host.batch = _forged
'''


def test_a_median_pushed_down_while_the_sum_fits_the_wall_is_refused(cpu_timed: Profile) -> None:
    """The samples' sum still accounts for each batch's wall; their median, which is what gets reported, does
    not describe the reps that ran."""
    r = cpu_timed(PATCH_MEDIAN + STARTER)
    assert r["correct"] is False and r["error_class"] == "timing_mismatch", r
    assert "median" in r["error"]


# -- the L2 regimes (--l2 cold | warm) ------------------------------------------------------------------------

# Reports, from inside the candidate's process, what its timed reps were set up with: the flush the judge asked
# for and whether a flush buffer exists there at all.
REPORT_FLUSH = '''
import torch as _torch

_Host = _torch.sys.modules["tools.candidate_host"].Host
_setup = _Host.time_setup


def _reporting(self, msg):
    answer = _setup(self, msg)
    print(f"flush_bytes={msg.header.get('flush_bytes')} buffer={self.flush_buf is not None}", flush=True)
    return answer


_Host.time_setup = _reporting
'''


@pytest.mark.parametrize(("l2", "flush"), [("cold", "flush_bytes=1048576 buffer=True"),
                                           ("warm", "flush_bytes=0 buffer=False")])
def test_a_profile_times_in_the_l2_regime_it_asked_for(interpreter_pool: Any, l2: str, flush: str) -> None:
    """A warm profile's reps run with no flush at all (no buffer, nothing launched); its report says which
    regime it ran in; and its timed loop ran in full, every rep checked, within the bracket."""
    source = f"# timed {l2}\n" + REPORT_FLUSH + STARTER  # its own source: no process kept from another regime
    r = interpreter_pool.run({"op": "profile", "problem": "softmax", "shape": "small", "source": source,
                              "cpu_timing": True, "budget_s": 0.05, "l2": l2}, timeout=240)
    assert r["correct"] is True, (r["error_class"], r["error"])
    assert r["timing"]["l2"] == l2
    assert flush in r["output_tail"] and r["output_tail"].count("flush_bytes=") == 1, r["output_tail"]
    loop = r["timing_loop"]
    assert loop["reps"] == r["timing"]["reps"] == 30 and loop["batches"] >= 1 and loop["checked_reps"] == 30
    assert r["verification"]["bounds"]["bracket"]["ok"]


def test_no_flush_bytes_means_no_buffer_and_nothing_launched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm regime's flush is a no-op in fact: no buffer is made and no reduction runs, and no spin is asked
    of torch for zero cycles."""
    import torch

    from tools.timing import Timer, flush_buffers, gpu_spin, l2_flush

    def launched(*args: object, **kwargs: object) -> None:
        raise AssertionError("a kernel was launched")

    assert flush_buffers(0, "cpu") == (None, None)
    monkeypatch.setattr(torch, "sum", launched)
    monkeypatch.setattr(torch.cuda, "_sleep", launched)
    l2_flush(None, None)
    gpu_spin(0)
    Timer(device="cpu", flush_bytes=0)._flush()
    with pytest.raises(AssertionError, match="launched"):  # the patch does catch a flush that runs
        Timer(device="cpu", flush_bytes=4096)._flush()


def test_each_regime_has_its_own_calibration_and_baseline_timing() -> None:
    """The bracket subtracts a rep's untimed work as the reps of this regime run it, and a warm candidate is
    compared with a warm baseline: neither figure is re-used across regimes."""
    import time
    from types import SimpleNamespace

    import torch

    from kernels import get_problem
    from tools import judge

    problem = get_problem("softmax")
    worker = SimpleNamespace(torch=torch, device="cpu", cuda=False, calibrations={}, baselines={}, parked=None)
    cold, warm = (judge.plan_timing(worker, problem, "small", l2) for l2 in ("cold", "warm"))
    assert (cold.l2, cold.flush_bytes, warm.l2, warm.flush_bytes) == ("cold", 1 << 20, "warm", 0)
    assert len(worker.calibrations) == 2

    base = problem.baselines[0]
    key = judge._baseline_key(problem, "small", base, {"l2": "cold"})
    worker.baselines[key] = (time.monotonic(), {"median_us": 7.0, "l2": "cold"})
    assert judge._held_baseline(worker, problem, "small", base, {"l2": "cold"})["l2"] == "cold"
    assert judge._held_baseline(worker, problem, "small", base, {"l2": "warm"}) is None


def test_the_baseline_is_replayed_as_a_graph_whatever_the_candidates_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The baseline's figure depends on nothing the caller or the candidate chooses: it is timed as a CUDA graph
    (eagerly only where capture fails, saying so), and one timing serves candidates of either mode."""
    from types import SimpleNamespace

    from tools import judge

    modes: list[bool] = []

    class Timer:
        def __init__(self, capturable: bool) -> None:
            self.capturable = capturable

        def measure(self, fns: dict, *, graph: bool, budget_s: float) -> dict:
            modes.append(graph)
            if graph and not self.capturable:
                raise RuntimeError("operation not permitted when stream is capturing")
            return {"baseline": {"median_us": 10.0 if graph else 14.0, "mode": "cuda_graph" if graph else "eager"}}

    problem = SimpleNamespace(name="softmax", inputs=lambda shape, seed, device: ())
    base = SimpleNamespace(name="torch", fn=lambda: None)
    for capturable, mode, median in ((True, "cuda_graph", 10.0), (False, "eager", 14.0)):
        modes.clear()
        timer = Timer(capturable)
        monkeypatch.setattr(judge, "calibration", lambda worker, l2, timer=timer: SimpleNamespace(timer=timer))
        worker = SimpleNamespace(torch=SimpleNamespace(cuda=SimpleNamespace(synchronize=lambda: None)),
                                 device="cuda", cuda=True, baselines={})
        first = judge._time_baseline(worker, problem, "small", base, {"l2": "cold", "graph": False})
        assert (first["mode"], first["median_us"]) == (mode, median)
        assert modes == ([True] if capturable else [True, False])
        if capturable:
            assert "note" not in first
        else:
            assert first["note"].startswith("timed eagerly") and "capturing" in first["note"]
        # A candidate timed in the other mode is compared with the same timing, not a new one.
        again = judge._time_baseline(worker, problem, "small", base, {"l2": "cold", "graph": True})
        assert again["median_us"] == median and len(modes) == (1 if capturable else 2)


class ParkedSession:
    """A kept candidate process: only whether it was closed matters here."""

    exit_status = None

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> str:
        self.closed = True
        return "closed"


def test_no_parked_process_lives_while_the_baseline_is_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept process could load the GPU from a thread of its own while it waits and slow the baseline, which is
    then held for every candidate: whoever decided to time the baseline, the process is closed first."""
    import time
    from types import SimpleNamespace

    from tools import judge

    parked = ParkedSession()
    seen: list[Any] = []
    worker = SimpleNamespace(torch=SimpleNamespace(cuda=SimpleNamespace(synchronize=lambda: None)),
                             device="cuda", cuda=True, baselines={}, parked=(parked, "sha", time.monotonic()))

    class Timer:
        def measure(self, fns: dict, *, graph: bool, budget_s: float) -> dict:
            seen.append(worker.parked)
            return {"baseline": {"median_us": 10.0, "mode": "cuda_graph"}}

    monkeypatch.setattr(judge, "calibration", lambda worker, l2: SimpleNamespace(timer=Timer()))
    problem = SimpleNamespace(name="softmax", inputs=lambda shape, seed, device: ())
    base = SimpleNamespace(name="torch", fn=lambda: None)
    judge._time_baseline(worker, problem, "small", base, {"l2": "cold"})
    assert seen == [None] and parked.closed


def test_the_reference_time_that_sets_the_checks_is_measured_with_no_candidate_process_alive() -> None:
    """The number of timed reps checked comes from how long a reference takes: a parked process that slowed it
    would cut its own checks. It is measured when the judge calibrates (the parked process closed) and held."""
    import time
    from types import SimpleNamespace

    import torch

    from kernels import get_problem
    from tools import judge

    problem = get_problem("softmax")
    worker = SimpleNamespace(torch=torch, device="cpu", cuda=False, calibrations={}, baselines={}, parked=None)
    worker.parked = (ParkedSession(), "sha", time.monotonic())
    first = judge.plan_timing(worker, problem, "small", "cold")
    assert worker.parked is None
    kept = ParkedSession()
    worker.parked = (kept, "sha", time.monotonic())
    slow = problem.reference
    problem_slowed = SimpleNamespace(**{k: getattr(problem, k) for k in ("name", "inputs", "output_names", "dtype_for",
                                                                         "refill")},
                                     reference=lambda *a: (time.sleep(0.5), slow(*a))[1])
    again = judge.plan_timing(worker, problem_slowed, "small", "cold")  # type: ignore[arg-type]
    assert not kept.closed  # a fresh calibration: the kept process stays for its repeat profile
    assert again.reference_s == first.reference_s < 0.5


def test_the_rep_count_follows_the_judges_wall_time_not_the_candidates_pilot() -> None:
    """A pilot that claims a slow call (1e7 us) asks for the fewest reps, one batch of 30, whose latency jitter then
    spreads over few reps and widens the bracket's allowance: the first batch's wall, the judge's own figure,
    plans the total again."""
    from tools import judge

    budget = 2e6
    assert judge.planned_reps(budget, 145.0 + 1e7) == judge.MIN_REPS  # what the lie alone would give
    first_batch_wall_per_rep = (30 * (145.0 + 20.0) + 600.0) / 30  # 30 honest 20 us reps, 145 us untimed each
    assert judge.planned_reps(budget, first_batch_wall_per_rep) == judge.MAX_REPS
    assert judge.planned_reps(budget, 1e5) == judge.MIN_REPS  # a call that is slow in the judge's own eyes


# A helper process started when the timed reps begin (not before the checks), alive from then on: on a GPU it could
# run the reps' work out of sight of the census (through CUDA IPC); here it only waits.
HELPER_AT_TIMED_REPS = '''
import torch as _torch

_Host = _torch.sys.modules["tools.candidate_host"].Host
_os = _torch.sys.modules["os"]
_time = _torch.sys.modules["time"]
_batch = _Host.batch
_started = []


def _with_helper(self, msg):
    if msg.header.get("seeds") and not _started:
        _started.append(True)
        if _os.fork() == 0:
            while True:
                _time.sleep(0.05)
    return _batch(self, msg)


_Host.batch = _with_helper
'''


def test_a_process_the_candidate_starts_for_its_timed_reps_is_refused(cpu_timed: Profile) -> None:
    r = cpu_timed(HELPER_AT_TIMED_REPS + STARTER)
    assert r["correct"] is False and r["error_class"] == "rejected", (r["error_class"], r["error"])
    assert "during its timed reps" in r["error"]
