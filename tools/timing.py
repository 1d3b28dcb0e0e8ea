"""GPU timing that a kernel engineer can trust (DESIGN.md §4).

Every function is timed in the same loop, interleaved rep by rep (this machine's clocks drift), with
the L2 flushed before each rep (the "cold" regime; "warm" leaves it as the previous work left it), CUDA events
around each call, and statistics over many reps.
For few-microsecond work, each function is captured once as a CUDA graph and its replays are timed,
which removes launch gaps equally for candidate and baseline. Runs inside the worker: torch only.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

L2_FLUSH_BYTES = 256 * 1024 * 1024  # > 4x the H200's 60 MB L2
# The judged timed reps flush with twice that: 135 us of GPU time a rep, so that even a 20 us kernel's reps
# stay bound by the GPU rather than by the host's ~100 us of Python per rep (the bracket needs GPU-bound reps;
# with 256 MB, MLA at B = 1 was host-bound by ~10 us a rep, measured on the H200).
REP_FLUSH_BYTES = 2 * L2_FLUSH_BYTES
# The L2 regimes a profile times in, each as (flush bytes, spin cycles) before every rep. "cold": the 512 MB read
# flush, the default. "warm": no flush, so a rep's inputs are in L2 as its refill wrote them; a GPU spin that
# touches no memory takes the flush's place in the queue, so that the reps stay bound by the GPU rather than by the
# host's Python (the bracket needs GPU-bound reps). 2^18 cycles: about 130 us at the H200's 1980 MHz, the cold
# flush's GPU time.
WARM_SPIN_CYCLES = 1 << 18
L2_REGIMES: dict[str, tuple[int, int]] = {"cold": (REP_FLUSH_BYTES, 0), "warm": (0, WARM_SPIN_CYCLES)}
# Those are a rep's least untimed GPU work. Where queueing a rep's untimed work (refill, flush, digest, copies) takes
# the judge's host more than 1/HOST_MARGIN of its GPU time, the judge doubles the regime's flush or spin (its
# "load", up to MAX_LOAD) until it does not: the candidate's process queues the same work no faster, and reps that
# catch up with the GPU show wall no sample explains. Measured on the H200 with the output digest, at load 1: an
# honest MLA bench configuration refused in a tuner run of 17 steps, and softmax starter profiles at bench refused
# in 2 of 8 once their refill no longer waited on the GPU (BENCHMARKS.md, "Fourth session on the judged path").
# A larger flush changes nothing the kernel sees (its L2 is as cold); it adds GPU time the bracket subtracts, and
# LOAD_SLACK's share of it to the allowance (tools.bounds).
HOST_MARGIN = 2.5
MAX_LOAD = 4
GRAPH_BELOW_US = 200.0  # auto mode: graph-replay when a call's GPU time is less than this
# ... or when launching it takes the host more than this share of its GPU time: eager reps would be host-bound
HOST_BOUND_SHARE = 0.5
# For measuring the flush itself: MARATHON_L2_FLUSH=write flushes by writing (the old way).
FLUSH_BY_WRITE = os.environ.get("MARATHON_L2_FLUSH", "read") == "write"


def summarize(samples_us: list[float]) -> dict[str, Any]:
    """Median and spread. spread_pct is the interquartile range over the median, in percent."""
    s = sorted(samples_us)
    n = len(s)

    def q(p: float) -> float:
        if n == 1:
            return s[0]
        k = (n - 1) * p
        lo, hi = math.floor(k), math.ceil(k)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    median = statistics.median(s)
    return {
        "median_us": median,
        "mean_us": statistics.fmean(s),
        "min_us": s[0],
        "p10_us": q(0.10),
        "p90_us": q(0.90),
        "spread_pct": 100.0 * (q(0.75) - q(0.25)) / median if median > 0 else 0.0,
        "reps": n,
    }


def flush_buffers(flush_bytes: int, device: str = "cuda") -> tuple[Any, Any]:
    """The buffer an L2 flush reads and the scalar it reduces into (float32: torch's float reduction streams
    at close to DRAM bandwidth, its int32-to-int64 one at a sixth of it, measured on the H200).

    No bytes, no buffers (None, None): the warm regime allocates nothing and `l2_flush` then launches nothing."""
    import torch

    if flush_bytes <= 0:
        return None, None
    return (torch.ones(flush_bytes // 4, dtype=torch.float32, device=device),
            torch.empty((), dtype=torch.float32, device=device))


def l2_flush(buf: Any, sink: Any) -> None:
    """Evict the L2 by streaming `buf` through it; nothing at all without a buffer (the warm regime).

    Read, don't write: a write-flush leaves L2 full of dirty lines whose write-back could land inside the next
    timed call. Measured on the H200 both give the same median (BENCHMARKS.md, "Agreement with Nsight
    Compute"); reading is the variant with nothing left to doubt. The judge's calibration and the candidate's
    timed reps call this same function, so the overhead the bracket subtracts is the one the reps ran.
    """
    import torch

    if buf is None:
        return
    if FLUSH_BY_WRITE:
        buf.zero_()
    else:
        torch.sum(buf, dim=0, out=sink)


def gpu_spin(cycles: int) -> None:
    """Keep the GPU busy for `cycles` SM clock cycles without touching memory (one thread, no loads), so the L2
    keeps what it holds. The warm regime's reps run it where cold reps flush: the queue stays ahead of the host,
    and the bracket's calibration, which calls this same function, counts it as the reps pay it. None for 0."""
    if cycles > 0:
        import torch

        torch.cuda._sleep(int(cycles))


CLOCK_PROBE_CYCLES = 2_000_000  # one probe spin: about 1 ms at the H200's 1,980 MHz, 6 ms at its idle 345
CLOCK_STEADY = 0.03  # two probes this close in wall time: the clock has stopped rising
CLOCK_RAISE_MAX_S = 0.4


def raise_clocks(max_s: float = CLOCK_RAISE_MAX_S) -> float:
    """Keep the GPU busy until its SM clock stops rising (or `max_s` passes); the seconds it took.

    An idle GPU sits at a fraction of its clock (345 MHz on the H200) and rises only under load: calls timed in
    the first milliseconds of work after an idle spell (a candidate's checks are mostly the host compiling) run
    several times slower than the rest, which made one profile's pilot pick eager timing for a 20 us kernel and
    its samples spread by 99%. Equal spins that take the same wall time twice in a row mean a steady clock."""
    import torch

    t_start = time.perf_counter()
    last = None
    while True:
        t0 = time.perf_counter()
        torch.cuda._sleep(CLOCK_PROBE_CYCLES)
        torch.cuda.synchronize()
        took = time.perf_counter() - t0
        if last is not None and abs(took - last) <= CLOCK_STEADY * last:
            break
        last = took
        if time.perf_counter() - t_start > max_s:
            break
    return time.perf_counter() - t_start


DIGEST_WORDS = 64  # a digest of one output: tools.commit_hash.FINAL_WORDS (checked there)


def commit_outputs(outs: Any, row: Any, gpu: bool) -> None:
    """Write into `row` (int32, [outputs, DIGEST_WORDS], on the device the digest runs on) a digest of each output.

    A timed rep commits to its outputs this way before the batch returns, inside the wall the judge brackets;
    the judge recomputes it on the outputs it fetches, so outputs filled in later (once the judge has named the
    reps it checks) disagree with it. With `gpu` (a profile on a GPU: the candidate's reps, the judge's check and
    its calibration alike, whatever device a tensor arrived on) the digest is tools.commit_hash's, queued on the
    current stream, so it reads the outputs as the rep left them; without, SHA-256 (the interpreter's protocol).
    Either way no outputs but the same bits meet it.
    """
    import torch

    for i, o in enumerate(outs):
        if gpu:
            from tools.commit_hash import gpu_digest

            gpu_digest(o.to(row.device), row[i])
        else:
            digest = hashlib.sha256(_bytes_of(o)).digest()
            row[i].zero_()
            row[i, :8] = torch.frombuffer(bytearray(digest), dtype=torch.int32)


@dataclass(frozen=True)
class SealedBatch:
    """A batch's commitments as they cross to the judge: each rep's digests (one hex string an output) and its key,
    what the next rep of the batch drew its inputs from (kernels.draws.ChainedDraws)."""

    digests: list[list[str]]
    keys: list[str]


def sealed(commits: Any) -> SealedBatch:
    """Each rep's digests and key from its digest rows ([reps, outputs, DIGEST_WORDS]), read off the device once the
    batch is done (one copy: the read-out is in the wall the bracket checks)."""
    from kernels.draws import key_hex

    host = commits.cpu().contiguous()
    return SealedBatch([[hashlib.sha256(_bytes_of(host[j, i])).hexdigest() for i in range(host.shape[1])]
                        for j in range(host.shape[0])], [key_hex(host[j]) for j in range(host.shape[0])])


@dataclass(frozen=True)
class RepCommitment:
    """What a rep that produced some outputs committed to: a digest of each, and the key the next rep's inputs are
    drawn from (both functions of the outputs' bits alone)."""

    digests: list[str]
    key: str


def committed(outs: Any, gpu: bool) -> RepCommitment:
    """The judge's recomputation of a rep's commitment from its outputs (`gpu` as the rep's)."""
    import torch

    row = torch.zeros((max(1, len(outs)), DIGEST_WORDS), dtype=torch.int32, device="cuda" if gpu else "cpu")
    commit_outputs(outs, row, gpu)
    batch = sealed(row[None])
    return RepCommitment(batch.digests[0][:len(outs)], batch.keys[0])


def _bytes_of(t: Any) -> bytes:
    import torch

    return t.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes()


@dataclass(frozen=True)
class RepOverhead:
    """A rep's untimed work as the judge calibrated it: `us`, what the bracket subtracts from a batch's wall a rep
    (GPU time outside the rep's events, and the host's read-out after the batch); `queued_us`, the GPU part; and
    `host_us`, the judge's host time to queue it (the candidate's process is no faster)."""

    us: float
    queued_us: float
    host_us: float


def keeps_gpu_ahead(runs: list[RepOverhead]) -> bool:
    """Whether calibration runs of one sequence show its GPU work HOST_MARGIN times the host's queueing of it. Noise
    (a context switch, a page fault) only lengthens a run, so each side is read at its least over the runs: one
    disturbed run does not raise the load, a sequence that is host-heavy in every run does."""
    return min(r.queued_us for r in runs) >= HOST_MARGIN * min(r.host_us for r in runs)


class Timer:
    """Times several callables against each other on the current CUDA device.

    The callables run as given: a caller that wants a guard around candidate code puts it inside the
    callable (cheap under graph replay, where it only runs at capture).
    """

    def __init__(self, device: str = "cuda", flush_bytes: int = L2_FLUSH_BYTES, spin_cycles: int = 0) -> None:
        import torch

        self.torch = torch
        self.flush_buf, self.flush_sink = flush_buffers(flush_bytes, device)
        self.spin_cycles = spin_cycles

    def _flush(self) -> None:
        """What runs before every rep: the L2 flush (cold) or the spin that stands in for it (warm)."""
        l2_flush(self.flush_buf, self.flush_sink)
        gpu_spin(self.spin_cycles)

    def pilot_us(self, fn: Callable[[], Any], calls: int = 5) -> float:
        """A rough eager time per call, after one warm-up call (JIT and autotune happen there)."""
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(calls):
            self._flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        return statistics.median(times)

    def as_graph(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """Capture `fn` once as a CUDA graph (after warm-up on a side stream) and return its replay."""
        torch = self.torch
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        return graph.replay

    def measure(self, fns: dict[str, Callable[[], Any]], *, graph: bool, budget_s: float = 2.0,
                min_reps: int = 30, max_reps: int = 2000,
                progress: Callable[[int, int], None] | None = None) -> dict[str, dict[str, Any]]:
        """Interleaved timing of every function; returns per-name statistics in microseconds."""
        torch = self.torch
        runners: dict[str, Callable[[], Any]] = {}
        pilot: dict[str, float] = {}
        for name, fn in fns.items():
            pilot[name] = self.pilot_us(fn)
            runners[name] = self.as_graph(fn) if graph else fn
        per_round_us = sum(pilot.values()) + 70.0 * len(fns)  # + the L2 flush
        reps = int(max(min_reps, min(max_reps, budget_s * 1e6 / max(per_round_us, 1.0))))
        names = list(runners)
        events = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(reps)] for n in names}
        wall_start = time.perf_counter()
        chunk = max(1, reps // 10)
        for i in range(reps):
            order = names if i % 2 == 0 else names[::-1]
            for name in order:
                self._flush()
                start, end = events[name][i]
                start.record()
                runners[name]()
                end.record()
            if progress and (i + 1) % chunk == 0:
                torch.cuda.synchronize()
                progress(i + 1, reps)
        torch.cuda.synchronize()
        wall_s = time.perf_counter() - wall_start
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            samples = [s.elapsed_time(e) * 1e3 for s, e in events[name]]
            out[name] = {**summarize(samples), "mode": "cuda_graph" if graph else "eager",
                         "pilot_us": pilot[name]}
        out["_loop"] = {"wall_s": wall_s, "reps": reps}
        return out


class Calibration:
    """The judge's own instruments: a Timer for baselines and the GPU time of a timed rep's untimed work.

    A rep's untimed work (regenerating its inputs from a seed into the buffers, the L2 flush, the two events,
    copying the outputs to the stash) is what the bracket (tools.bounds) subtracts from the wall time around a
    batch. It is measured here, in a process where candidate code never ran, by the same sequence the
    candidate's reps run (tools.candidate_host.Host.batch), with the call left out: events around the whole
    loop, less what the inner events enclose, so that the gaps between its operations count as they do there.
    """

    def __init__(self, l2: str = "cold", load: int = 1) -> None:
        self.l2, self.load = l2, load
        flush_bytes, spin_cycles = L2_REGIMES[l2]
        self.flush_bytes, self.spin_cycles = flush_bytes * load, spin_cycles * load
        self.timer = Timer(flush_bytes=self.flush_bytes, spin_cycles=self.spin_cycles)
        self._siblings: dict[tuple[str, int], Calibration] = {(l2, load): self}

    def in_regime(self, l2: str, load: int = 1) -> Calibration:
        """The instruments for the L2 regime `l2` at `load` times its untimed work: this one, or a sibling made on
        first use and kept (a warm one holds no flush buffer; the cold ones 512 MB times their load)."""
        if (l2, load) not in self._siblings:
            sibling = Calibration(l2, load)
            sibling._siblings = self._siblings
            self._siblings[(l2, load)] = sibling
        return self._siblings[(l2, load)]

    def overhead_us(self, refill: Callable[[list[Any], int, Any], None], inputs: Any,
                    out_specs: list[tuple[tuple[int, ...], Any]], slots: int, graph: bool = False,
                    reps: int = 16) -> RepOverhead:
        """GPU microseconds per rep outside its two events: `refill(buffers, i, key)` as the reps regenerate
        their inputs (keyed by the previous rep's digest rows, None for the first), the flush, and the copy of the
        outputs to the next of `slots` stash slots. Between the events runs a null call (a fill of the outputs,
        replayed as a graph when the reps replay graphs): what launching a call or a graph costs outside its events
        is then counted as the reps pay it, and the outputs are as fresh in the L2 as a rep's are when the
        commitment and the copy read them."""
        torch = self.timer.torch
        buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        outs = [torch.zeros(shape, dtype=dtype, device="cuda") for shape, dtype in out_specs]

        def null() -> None:
            for o in outs:
                o.fill_(0)

        if graph:
            null = self.timer.as_graph(null)
        stash = [[torch.empty_like(o) for o in outs] for _ in range(max(1, min(slots, reps)))]
        commits = torch.zeros((reps, len(outs), DIGEST_WORDS), dtype=torch.int32, device="cuda")
        inner = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        outer = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with _gc_paused():  # a collection inside the loop would read as host time the reps pay
            for warm in (True, False):
                n = 2 if warm else reps
                torch.cuda.synchronize()
                outer[0].record()
                queued_from = time.perf_counter()
                for i in range(n):
                    refill(buffers, i, commits[i - 1] if i else None)
                    self.timer._flush()
                    inner[i][0].record()
                    null()
                    inner[i][1].record()
                    commit_outputs(outs, commits[i], gpu=True)
                    for st, o in zip(stash[i % len(stash)], outs):
                        st.copy_(o)
                outer[1].record()
                # 16 reps of a few dozen launches each stay far inside the launch queue's depth (about a thousand),
                # so the host is never held back by the GPU here: this is its own time to queue the work.
                host_us = (time.perf_counter() - queued_from) * 1e6 / n
                torch.cuda.synchronize()
        total_us = outer[0].elapsed_time(outer[1]) * 1e3
        # The reps' host work after their batch synchronised, while the GPU idles: reading every rep's two
        # events (its sample) and the commitments. It lands in the batch's wall, so it is a rep's overhead too.
        t0 = time.perf_counter()
        _ = [s.elapsed_time(e) for s, e in inner], sealed(commits)
        readout_us = (time.perf_counter() - t0) * 1e6 / reps
        queued_us = max(0.0, (total_us - sum(s.elapsed_time(e) * 1e3 for s, e in inner)) / reps)
        return RepOverhead(queued_us + readout_us, queued_us, host_us)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class WallCalibration:
    """Calibration's counterpart under the CPU interpreter, by the wall clock: there the timed reps test the
    protocol (fresh inputs per rep, post-hoc checks, the bracket), never a kernel; the cold flush is token-sized
    and nothing spins (there is no GPU queue to keep ahead of the host)."""

    spin_cycles = 0

    def __init__(self, l2: str = "cold") -> None:
        self.l2 = l2
        self.flush_bytes = 1 << 20 if L2_REGIMES[l2][0] else 0

    def overhead_us(self, refill: Callable[[list[Any], int, Any], None], inputs: Any,
                    out_specs: list[tuple[tuple[int, ...], Any]], slots: int, graph: bool = False,
                    reps: int = 9) -> RepOverhead:
        import torch

        buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        outs = [torch.empty(shape, dtype=dtype) for shape, dtype in out_specs]
        stash = [torch.empty_like(o) for o in outs]
        flush, sink = flush_buffers(self.flush_bytes, "cpu")
        times = []
        row = torch.zeros((max(1, len(outs)), DIGEST_WORDS), dtype=torch.int32)
        for i in range(reps):
            t0 = time.perf_counter()
            refill(buffers, i, row if i else None)
            l2_flush(flush, sink)
            commit_outputs(outs, row, gpu=False)
            sealed(row[None])  # a rep's share of its batch's read-out
            for st, o in zip(stash, outs):
                st.copy_(o)
            times.append((time.perf_counter() - t0) * 1e6)
        us = statistics.median(times)
        return RepOverhead(us, us, 0.0)  # no GPU queue to keep ahead of the host


def measure_ceilings() -> dict[str, float]:
    """This GPU's copy bandwidth (read + write) and bf16 matmul rate, measured, not from a datasheet."""
    import torch

    n = 1 << 28  # 1 GiB of float32 ... read and written
    src = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")

    def best_ms(fn: Callable[[], Any], reps: int) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times)

    copy_ms = best_ms(lambda: dst.copy_(src), 10)
    mm_ms = best_ms(lambda: a @ b, 10)
    return {"dram_gbps": 2 * n * 4 / (copy_ms * 1e-3) / 1e9, "bf16_tflops": 2 * 8192**3 / (mm_ms * 1e-3) / 1e12}
