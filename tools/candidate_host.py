"""The harness inside a candidate process: load the candidate, run entry(), time it, send back data. Decides nothing.

Runs in the sandboxed process of tools.sandbox, so everything here is as untrusted as the candidate: a candidate
can read and patch this module. That is why it only answers requests with data (outputs as raw tensors, timing
samples) that the judge (tools.judge) checks against its own reference and its own bounds; a forged answer can
make a candidate look wrong, never right.

Requests (tools.wire frames):
- load: import the candidate under the run-time guard (pointed messages for imports and torch compute);
- call: entry(*inputs) under the guard, on inputs sent or generated here from the judge's seed; the outputs
  go back;
- pilot: a rough eager time per call (it only picks the timing mode);
- ping: alive (asked before a kept process is reused);
- release: drop the timing state (the judge keeps the process for a repeat profile of the same source);
- time_setup / batch / fetch / done: the timed reps. Each rep regenerates its inputs from a seed of the judge's
  into the same buffers (values never seen before, so no output can be cached), an L2 flush (or, warm, a GPU
  spin in its place), CUDA events around each call (a graph replay, or entry() itself), each rep's outputs
  copied to a stash slot; the judge picks which slots to check only after the batch has run, so a rep cannot
  know whether it will be checked. Timed reps run without the guard (its host overhead would land in the timed
  region); so does the judge's kernel census, so both see the candidate as it runs when timed.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from kernels import get_problem
from tools import guard, wire
from tools.candidate import GluonNeedsGpu, describe_exception, gluon_launches_refused, load_candidate
from tools.timing import (
    DIGEST_WORDS,
    commit_outputs,
    flush_buffers,
    gpu_spin,
    l2_flush,
    raise_clocks,
    sealed,
)

REQUEST_TIMEOUT_S = 3600.0
INPUT_LIMIT_BYTES = 8 << 30
FLUSH_BYTES = 256 * 1024 * 1024
PILOT_CALLS = 9  # the pilot's medians only pick the timing mode (tools.judge.takes_graph)
PILOT_SPIN_CYCLES = 4_000_000  # ~2 ms at 1,980 MHz: the host launches a pilot call while the GPU is still busy


@contextmanager
def _call_profiler() -> Iterator[None]:
    """MARATHON_DIAG_PROFILE=N: the N functions of most cumulative time in the first call of a candidate process
    (its Triton compiles), printed to the process's output (a profile report's output_tail). A diagnostic of where a
    fresh process's first call goes; nothing reads it."""
    top = int(os.environ.get("MARATHON_DIAG_PROFILE") or 0)
    if top <= 0:
        yield
        return
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(top)
        rows = [ln.split(None, 5) for ln in text.getvalue().splitlines()]
        rows = [r for r in rows if len(r) == 6 and r[3].replace(".", "", 1).isdigit()]
        print("\n".join(f"{r[3]} {r[5][-90:]}" for r in rows[:top]), flush=True)


def _error(exc: BaseException, path: Path, fatal: bool = False) -> dict[str, Any]:
    d = describe_exception(exc, path)
    if isinstance(exc, guard.TorchComputeRefused) or (isinstance(exc, ImportError) and "refused" in str(exc)):
        cls = "rejected"
    elif isinstance(exc, GluonNeedsGpu):
        cls = "needs_gpu"
    else:
        cls = "runtime_error"
    return {"ok": False, "error": {"error_class": cls, "message": d["message"], "line": d["line"],
                                   "type": d["type"], "kernel": getattr(exc, "kernel", None)},
            "fatal": fatal}


class WallEvent:
    """A CUDA event's interface over the wall clock, for timed reps under the CPU interpreter: those time the
    protocol (rotation, post-hoc checks, the bracket) in tests, never a kernel."""

    def __init__(self) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: WallEvent) -> float:
        return (end.t - self.t) * 1e3  # milliseconds, as torch.cuda.Event.elapsed_time


class Host:
    def __init__(self, sock: socket.socket, path: Path) -> None:
        import torch

        self.torch = torch
        self.sock = sock
        self.path = path
        self.cuda = os.environ.get("TRITON_INTERPRET") != "1"
        self.device = "cuda" if self.cuda else "cpu"
        self.entry: Any = None
        self.rep_recipe: tuple[str, str] = ("", "")
        self.buffers: list[Any] = []
        self.graph: Any = None
        self.graph_outputs: tuple[Any, ...] = ()
        self.stash: list[tuple[Any, ...]] = []
        self.flush_buf: Any = None
        self.flush_sink: Any = None
        self.spin_cycles = 0
        self.events: list[tuple[Any, Any]] = []
        self.out_specs: list[dict[str, Any]] = []
        self.last_checksums: list[Any] | None = None
        self.calls_made = 0

    # -- helpers ------------------------------------------------------------------------------------

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def _event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True) if self.cuda else WallEvent()

    def _inputs(self, msg: wire.Message) -> list[Any]:
        """The inputs as sent, or generated here from the judge's seed (the judge generates the same ones for its
        reference, and compares `checksums` of both: a process that generates other values only fails)."""
        gen = msg.header.get("generate")
        if isinstance(gen, dict):
            return self._generate(gen)
        values = wire.unpack_values(msg.header.get("inputs", []), msg.fds, INPUT_LIMIT_BYTES)
        return [v.to(self.device) if isinstance(v, self.torch.Tensor) else v for v in values]

    def _generate(self, gen: dict[str, Any]) -> list[Any]:
        values = list(get_problem(str(gen["problem"])).inputs(str(gen["shape"]), int(gen["seed"]), self.device))
        self.last_checksums = wire.checksums(values)
        return values

    def _outputs(self, raw: Any) -> tuple[Any, ...]:
        """Plain tensors only: a Tensor subclass or a tuple subclass could run code (lazy compute) whenever the
        harness touches it, outside the timed region."""
        torch = self.torch
        if type(raw) is torch.Tensor:
            return (raw,)
        if type(raw) in (tuple, list) and raw and all(type(v) is torch.Tensor for v in raw):
            return tuple(raw)
        kinds = ", ".join(type(v).__name__ for v in raw) if type(raw) in (tuple, list) else type(raw).__name__
        raise TypeError(f"expected a torch.Tensor or a tuple of them (no subclasses), got {kinds}")

    def _send_tensors(self, header: dict[str, Any], tensors: list[Any]) -> None:
        specs, fds = [], []
        for t in tensors:
            specs.append(wire.tensor_spec(t))
            fds.append(wire.tensor_to_fd(t))
        try:
            wire.send(self.sock, {**header, "tensors": specs}, fds)
        finally:
            for fd in fds:
                os.close(fd)

    def _guarded(self) -> Any:
        return guard.candidate_guard()

    def _cpu_gluon(self) -> Any:
        return nullcontext() if self.cuda else gluon_launches_refused()

    # -- requests -----------------------------------------------------------------------------------

    def load(self) -> dict[str, Any]:
        try:
            with self._guarded():
                module = load_candidate(self.path)
        except BaseException as exc:
            d = _error(exc, self.path)
            if d["error"]["error_class"] == "runtime_error":
                d["error"]["error_class"] = "import_error"
            return d
        self.entry = module.entry
        return {"ok": True}

    def call(self, msg: wire.Message) -> dict[str, Any] | None:
        torch = self.torch
        self.last_checksums = None
        t0 = time.perf_counter()
        inputs = self._inputs(msg)
        before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        self._sync()
        t1 = time.perf_counter()
        diag = _call_profiler() if not self.calls_made else None
        self.calls_made += 1
        try:
            with self._cpu_gluon(), self._guarded(), diag or nullcontext():
                raw = self.entry(*inputs)
            self._sync()
        except BaseException as exc:
            return _error(exc, self.path, fatal=self.cuda and _context_lost(torch, exc))
        try:
            outs = self._outputs(raw)
        except TypeError as exc:
            return {"ok": False, "error": {"error_class": "wrong_output", "line": None,
                                           "message": f"entry() returned the wrong thing: {exc}"}}
        mutated = [i for i, (x, x0) in enumerate(zip(inputs, before))
                   if isinstance(x, torch.Tensor) and not torch.equal(x, x0)]
        tensors = list(outs)
        if msg.header.get("return_inputs"):  # for the judge's own comparison with the inputs it made
            tensors += [x for x in inputs if isinstance(x, torch.Tensor)]
        # Where a call's time went, as this process saw it: a diagnostic for the report, never a figure.
        times = {"inputs_s": round(t1 - t0, 4), "entry_s": round(time.perf_counter() - t1, 4)}
        self._send_tensors({"ok": True, "mutated": mutated, "checksums": self.last_checksums,
                            "n_outputs": len(outs), "times": times}, tensors)
        return None

    def pilot(self, msg: wire.Message) -> dict[str, Any]:
        """The call's GPU time (queued behind a spin, so the host's launch work is hidden) and its host time (what
        the host spends launching it): they pick the timing mode, nothing else."""
        torch = self.torch
        inputs = self._inputs(msg)
        try:
            for _ in range(2):
                self.entry(*inputs)
            self._sync()
            if self.cuda:
                raise_clocks()  # a pilot at the idle clock reads a 20 us kernel as 200 us
            gpu, host = [], []
            for _ in range(PILOT_CALLS):
                start, end = self._event(), self._event()
                gpu_spin(PILOT_SPIN_CYCLES if self.cuda else 0)  # off a GPU there is no queue to fill
                start.record()
                t0 = time.perf_counter()
                self.entry(*inputs)
                host.append((time.perf_counter() - t0) * 1e6)
                end.record()
                self._sync()
                gpu.append(start.elapsed_time(end) * 1e3)
        except BaseException as exc:
            return _error(exc, self.path, fatal=self.cuda and _context_lost(torch, exc))
        gpu.sort()
        host.sort()
        return {"ok": True, "pilot_us": gpu[len(gpu) // 2], "host_us": host[len(host) // 2]}

    def time_setup(self, msg: wire.Message) -> dict[str, Any]:
        """The buffers every timed rep works in, filled from the judge's first seed, warmed up and (when asked)
        captured as a graph; the L2 flush, or the spin the judge asks for in its place (a spin only on a GPU); and
        the recipe each rep regenerates its inputs with."""
        torch = self.torch
        generate = msg.header.get("generate")
        setup_checksums = None
        if isinstance(generate, dict):
            values = self._generate(generate)
            setup_checksums = self.last_checksums
            self.rep_recipe = (str(generate["problem"]), str(generate["shape"]))
        else:
            values = self._inputs(msg)
        self.buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
        self.flush_buf, self.flush_sink = self._flush_buffers(int(msg.header.get("flush_bytes", FLUSH_BYTES)))
        self.spin_cycles = int(msg.header.get("spin_cycles", 0)) if self.cuda else 0
        self.stash = []
        self.graph = None
        try:
            for _ in range(2):
                outs = self._outputs(self.entry(*self.buffers))
            self._sync()
            if msg.header.get("graph"):
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(2):
                        self.entry(*self.buffers)
                torch.cuda.current_stream().wait_stream(stream)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    raw = self.entry(*self.buffers)
                torch.cuda.synchronize()
                self.graph = graph
                self.graph_outputs = self._outputs(raw)
                outs = self.graph_outputs
            # The digest's and the refill's kernels compile here, not in the first batch's wall. The refill writes
            # into the buffers a graph may have captured, as every rep's does.
            row = torch.zeros((max(1, len(outs)), DIGEST_WORDS), dtype=torch.int32, device=self.device)
            commit_outputs(outs, row, gpu=self.cuda)
            if self.rep_recipe[0]:
                problem = get_problem(self.rep_recipe[0])
                problem.refill(self.buffers, self.rep_recipe[1], 0)  # a batch's first rep: the zero key's allocation
                problem.refill(self.buffers, self.rep_recipe[1], 0, row)
            if self.cuda:
                raise_clocks()  # the first batch follows at once: its reps at the clock the rest run at
        except BaseException as exc:
            return _error(exc, self.path, fatal=self.cuda and _context_lost(torch, exc))
        self.out_specs = [wire.tensor_spec(o) for o in outs]
        return {"ok": True, "graph": self.graph is not None, "outputs": self.out_specs, "checksums": setup_checksums}

    def _flush_buffers(self, nbytes: int) -> tuple[Any, Any]:
        if self.cuda:
            return flush_buffers(nbytes, self.device)
        return flush_buffers(nbytes, "cpu")

    def _stash_slot(self, j: int, outs: tuple[Any, ...]) -> None:
        while len(self.stash) <= j:
            self.stash.append(tuple(self.torch.empty_like(o) for o in outs))
        slot = self.stash[j]
        if len(slot) != len(outs) or any(s.shape != o.shape or s.dtype != o.dtype for s, o in zip(slot, outs)):
            self.stash[j] = slot = tuple(self.torch.empty_like(o) for o in outs)
        for s, o in zip(slot, outs):
            s.copy_(o)

    def batch(self, msg: wire.Message) -> dict[str, Any]:
        """Timed reps, one per seed: fresh inputs written into the buffers, drawn from the seed and the previous
        rep's commitment, the L2 flush or spin, the call between two events, a commitment to its outputs
        (tools.timing.commit_outputs), its outputs stashed. Every rep's values are new, so no output can be
        cached, and none exist before the rep before it has run, so no two reps can be served by one call."""
        torch = self.torch
        seeds = [int(x) for x in msg.header.get("seeds", [])]
        while len(self.events) < len(seeds):  # made once: making them costs the host ~5 us a rep, in the wall
            self.events.append((self._event(), self._event()))
        events = self.events[:len(seeds)]
        try:
            problem_name, shape = self.rep_recipe
            # An empty batch (the latency the bracket subtracts) needs no recipe: the judge's null process has none.
            problem = get_problem(problem_name) if seeds else None
            commits = torch.zeros((len(seeds), max(1, len(self.out_specs)), DIGEST_WORDS), dtype=torch.int32,
                                  device=self.device)
            for j, seed in enumerate(seeds):
                assert problem is not None
                problem.refill(self.buffers, shape, seed, commits[j - 1] if j else None)
                l2_flush(self.flush_buf, self.flush_sink)
                gpu_spin(self.spin_cycles)
                start, end = events[j]
                start.record()
                if self.graph is not None:
                    self.graph.replay()
                    outs = self.graph_outputs
                else:
                    outs = self._outputs(self.entry(*self.buffers))
                end.record()
                commit_outputs(outs, commits[j], gpu=self.cuda)
                self._stash_slot(j, outs)
            self._sync()
        except BaseException as exc:
            return _error(exc, self.path, fatal=self.cuda and _context_lost(torch, exc))
        read = sealed(commits)
        return {"ok": True, "us": [s.elapsed_time(e) * 1e3 for s, e in events], "commits": read.digests,
                "keys": read.keys}

    def release(self) -> dict[str, Any]:
        """Drop the timing state (stash, graph, buffers) while the judge keeps this process for a repeat."""
        self.stash, self.graph, self.graph_outputs, self.buffers = [], None, (), []
        self.flush_buf = self.flush_sink = None
        if self.cuda:
            self.torch.cuda.empty_cache()
        return {"ok": True}

    def fetch(self, msg: wire.Message) -> None:
        slots = [int(j) for j in msg.header.get("slots", [])]
        tensors = [t for j in slots for t in self.stash[j]]
        self._send_tensors({"ok": True, "per_slot": len(self.stash[slots[0]]) if slots else 0}, tensors)


def _context_lost(torch: Any, exc: BaseException) -> bool:
    text = str(exc)
    if any(m in text for m in ("illegal memory access", "illegal address", "device-side assert",
                               "unspecified launch failure", "misaligned address", "illegal instruction")):
        return True
    try:
        torch.cuda.synchronize()
    except Exception:
        return True
    return False


def serve(sock: socket.socket, path: Path) -> None:
    host = Host(sock, path)
    while True:
        try:
            msg = wire.recv(sock, REQUEST_TIMEOUT_S)
        except wire.WireError:
            return
        op = msg.header.get("op")
        started = time.perf_counter()
        try:
            if op == "load":
                answer: dict[str, Any] | None = host.load()
            elif op == "call":
                answer = host.call(msg)
            elif op == "pilot":
                answer = host.pilot(msg)
            elif op == "time_setup":
                answer = host.time_setup(msg)
            elif op == "batch":
                answer = host.batch(msg)
            elif op == "fetch":
                host.fetch(msg)
                answer = None
            elif op == "release":
                answer = host.release()
            elif op == "ping":
                answer = {"ok": True}
            elif op == "done":
                return
            else:
                answer = {"ok": False, "error": {"error_class": "protocol_error", "line": None,
                                                 "message": f"unknown request {op!r}"}}
        except BaseException as exc:  # a fault in the harness itself (or a candidate that broke it)
            answer = _error(exc, path)
        finally:
            msg.close_fds()
        if answer is not None:
            answer.setdefault("host_s", round(time.perf_counter() - started, 6))
            wire.send(sock, {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                             for k, v in answer.items()})
