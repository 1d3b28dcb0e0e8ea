"""The timers monkeypatched: CUDA events that report a fiftieth of the candidate's time, and the harness's timer.

Trick: at import, `torch.cuda.Event.record` and `.elapsed_time`, `torch.cuda.CUDAGraph.capture_end` and `.replay`
are wrapped: the event recorded just before entry() runs (or before a graph that entry() was captured into is
replayed) is remembered as the candidate's, and its elapsed_time comes back divided by 50; the baseline's events
are left alone, so the speedup is 50x too. `time.perf_counter` runs at a hundredth of real speed. And any
`Timer.measure` found in the tools' modules is wrapped to shrink the candidate's statistics, which lasts for
every later candidate in a warm process: control_honest.py runs after it in the same pool and must get an honest
time. The kernel itself is honest.
Expected verdict: impossible_timing or timing_mismatch, or correct with an honest time (at least 40 us at bench,
at most 5x torch.softmax, which the honest kernel beats by about 2x there); the same limits for the honest
candidate after it.
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "bench"
GPU = True
EXPECT = {"impossible_timing", "timing_mismatch", "rejected", "honest_timing"}
ISOLATION = "fresh"
NEXT = ["control_honest.py"]
MIN_MEDIAN_US = 40.0
MAX_SPEEDUP = 5.0
SHRINK = 50.0

_modules = torch.sys.modules
_state = {"last": None, "mine": set(), "capturing_me": False}
Event = torch.cuda.Event
Graph = torch.cuda.CUDAGraph
_record, _elapsed = Event.record, Event.elapsed_time
_capture_end, _replay = Graph.capture_end, Graph.replay


def record(self, *args, **kwargs):
    _state["last"] = self
    return _record(self, *args, **kwargs)


def elapsed_time(self, end):
    t = _elapsed(self, end)
    return t / SHRINK if id(self) in _state["mine"] else t


def capture_end(self, *args, **kwargs):
    out = _capture_end(self, *args, **kwargs)
    if _state["capturing_me"]:
        self._candidate_graph = True
        _state["capturing_me"] = False
    return out


def replay(self, *args, **kwargs):
    if getattr(self, "_candidate_graph", False) and _state["last"] is not None:
        _state["mine"].add(id(_state["last"]))
    return _replay(self, *args, **kwargs)


Event.record = record
Event.elapsed_time = elapsed_time
Graph.capture_end = capture_end
Graph.replay = replay

_time = _modules["time"]
_perf_counter = _time.perf_counter
_t0 = _perf_counter()


def slow_perf_counter():
    return _t0 + (_perf_counter() - _t0) / 100.0


_time.perf_counter = slow_perf_counter


def _wrap_measure(measure):
    def measure_faster(*args, **kwargs):
        stats = measure(*args, **kwargs)
        cand = stats.get("candidate") if isinstance(stats, dict) else None
        if isinstance(cand, dict):
            for k, v in list(cand.items()):
                if k.endswith("_us") and isinstance(v, (int, float)):
                    cand[k] = v / SHRINK
        return stats

    return measure_faster


for _name, _module in list(_modules.items()):
    if _module is not None and (_name.startswith("tools") or _name == "__main__"):
        for _value in list(vars(_module).values()):
            if isinstance(_value, type) and callable(vars(_value).get("measure")):
                _value.measure = _wrap_measure(vars(_value)["measure"])


@triton.jit
def softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


def entry(x):
    if torch.cuda.is_current_stream_capturing():
        _state["capturing_me"] = True
    elif _state["last"] is not None:
        _state["mine"].add(id(_state["last"]))
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    return out
