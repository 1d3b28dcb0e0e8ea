"""kill -9 of the MCP server during profiles, many times over: no committed event may be lost.

    python benchmarks/bench_kill.py [--cycles 100] [--seed 0] [--json-out PATH] [--home PATH]

Each cycle starts `marathon serve --http` (its own process group) on the same MARATHON_HOME, opens
a streamable-HTTP client and runs two call streams on it at once: `profile` calls of the softmax
starter (every source different: NUM_WARPS and a comment changed) and `note` calls (three commits
each: intent, note, result), so the kill lands among writes. At a random moment during one of the
profiles (uniform over that profile's expected duration, learned from the profiles that finished)
the bench sends SIGKILL to the server's whole process group. Then, before the restart:

- a fresh read-only SQLite connection reads every event and source: what a reader sees after the
  kill is, by definition, committed;
- every event seen earlier (by earlier snapshots, and by a reader that polls the log during the
  cycle) must be there with the same ts, run_id, kind, payload text and key, and every note and
  attempt id a call returned to the client must be there too (acknowledged means durable);
- PRAGMA integrity_check must say ok;
- processes left over (the server's worker pool starts its workers in sessions of their own, so a
  kill of the server's group does not reach them) are recorded and followed until they exit.

After the last cycle a final server starts cleanly, answers a call and is stopped with SIGINT; the
log is checked once more, intents without a result (the calls a kill interrupted) are counted, and
any process still alive under MARATHON_HOME after --orphan-grace seconds is an orphan (then killed).

Without a GPU (no nvidia-smi, or CUDA_VISIBLE_DEVICES="") the pool checks candidates under the Triton
interpreter, which is what makes a hundred cycles take minutes. Prints one JSON summary (and writes
it to --json-out); exits 1 if an event was lost, the log failed its check, or an orphan remained.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import Implementation

ROOT = Path(__file__).resolve().parent.parent
STARTER = (ROOT / "kernels" / "softmax" / "starter.py").read_text()
WARPS = (1, 2, 4, 8, 16)
EventRow = tuple[float, Any, str, str, Any]  # ts, run_id, kind, payload text, key


# -- the server ---------------------------------------------------------------------------------------

def use_interpreter() -> bool:
    return os.environ.get("CUDA_VISIBLE_DEVICES") == "" or os.environ.get("TRITON_INTERPRET") == "1" \
        or shutil.which("nvidia-smi") is None


def server_env(home: Path, token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MARATHON_HOME", "MARATHON_TOKEN", "MARATHON_RUN_ID")}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update({"PYTHONPATH": path, "MARATHON_HOME": str(home), "MARATHON_TOKEN": token,
                "TRITON_CACHE_DIR": env.get("TRITON_CACHE_DIR", str(home / "triton-cache"))})
    if use_interpreter():
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(home: Path, port: int, token: str) -> subprocess.Popen[bytes]:
    log = open(home / "serve.log", "ab")  # a file, not a pipe: a full pipe would stall the server
    proc = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--http", "--port", str(port),
                             "--log-level", "WARNING"], cwd=ROOT, env=server_env(home, token),
                            stdout=log, stderr=log, start_new_session=True)
    log.close()
    return proc


async def wait_listening(proc: subprocess.Popen[bytes], port: int, home: Path, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}): {(home / 'serve.log').read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"server did not listen within {limit_s:.0f} s")
        await anyio.sleep(0.02)


def client(port: int, token: str, name: str) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http), mode="legacy",
                  client_info=Implementation(name=name, version="1"))


def candidate(cycle: int, n: int, rng: random.Random) -> str:
    warps = rng.choice(WARPS)
    return STARTER.replace("NUM_WARPS = 8", f"NUM_WARPS = {warps}") + f"\n# bench_kill cycle {cycle} call {n}\n"


# -- processes ----------------------------------------------------------------------------------------

def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, pgid, starttime, ppid) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[2]), int(fields[19]), int(fields[1])


def _ancestors() -> set[int]:
    """This process and its ancestors (never counted as the server's, whatever their cwd)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        st = _stat(pid)
        pid = st[3] if st else 0
    return out


def sandbox_roots(home: Path, workers: int = 64) -> list[str]:
    """Where the workers' candidate processes work: outside MARATHON_HOME, one folder per worker directory
    (tools.worker.sandbox_root: $MARATHON_SANDBOX_DIR or the temp dir, then a hash of the worker's cwd)."""
    base = Path(os.environ.get("MARATHON_SANDBOX_DIR") or tempfile.gettempdir()) / f"marathon-sandbox-{os.geteuid()}"
    dirs = [str(home.resolve() / "cache" / "workers" / f"worker{i}") for i in range(workers)]
    return [str(base / hashlib.sha256(d.encode()).hexdigest()[:12]) for d in dirs]


def remove_home(home: Path) -> None:
    """Delete a temporary MARATHON_HOME and the workers' sandbox folders that belong to it."""
    for d in sandbox_roots(home):
        shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def related_processes(home: Path, pgids: set[int]) -> dict[int, dict[str, Any]]:
    """Live processes (zombies excluded) that belong to a server on `home`: in one of `pgids`, working
    under `home` (the server, its workers in home/cache/workers/workerN) or under a worker's sandbox
    folder (candidate processes), and every descendant of those. Not this process nor its ancestors."""
    mine = _ancestors()
    roots = [str(home.resolve())]
    sandboxes = sandbox_roots(home)
    procs: dict[int, dict[str, Any]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        pid = int(entry)
        st = _stat(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        procs[pid] = {"pid": pid, "start": st[2], "ppid": st[3], "pgid": st[1], "cwd": cwd, "cmd": cmd[:160]}
    found = {pid for pid, p in procs.items()
             if p["pgid"] in pgids or _under(p["cwd"], roots) or _under(p["cwd"], sandboxes)}
    grew = True
    while grew:  # descendants, wherever they work
        more = {pid for pid, p in procs.items() if p["ppid"] in found and pid not in found}
        found |= more
        grew = bool(more)
    out = {}
    for pid in found:
        p = procs[pid]
        role = "candidate" if _under(p["cwd"], sandboxes) else _role(pid, p["cmd"])
        out[pid] = {"pid": pid, "start": p["start"], "role": role, "cmd": p["cmd"]}
    return out


def _role(pid: int, cmd: str) -> str:
    """candidate (a sandbox uid, where the server runs as root), worker (the judge or its zygote), server, exiting
    (no command line left), other."""
    try:
        uid = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("Uid:"))
    except (OSError, StopIteration, ValueError):
        uid = -1
    if uid != os.getuid() and uid >= 610_000:
        return "candidate"
    if not cmd:
        return "exiting"
    if "tools.worker" in cmd:
        return "worker"
    return "server" if " serve " in f"{cmd} " else "other"


class Survivors:
    """Processes that outlived a kill, followed (every 50 ms, in a thread) until they exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, dict[str, Any]] = {}
        self.done: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def add(self, procs: dict[int, dict[str, Any]], cycle: int, killed_at: float) -> None:
        with self._lock:
            for pid, p in procs.items():
                self._live.setdefault(pid, {**p, "cycle": cycle, "killed_at": killed_at})

    def _gone(self, p: dict[str, Any]) -> bool:
        st = _stat(p["pid"])
        return st is None or st[0] in ("Z", "X") or st[2] != p["start"]

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            with self._lock:
                for pid, p in list(self._live.items()):
                    if self._gone(p):
                        p["linger_s"] = round(time.monotonic() - p["killed_at"], 3)
                        self.done.append(p)
                        del self._live[pid]

    def live(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._live.values())

    def finish(self, grace_s: float) -> list[dict[str, Any]]:
        """Wait up to grace_s for the rest to exit; kill (by pid) and return those that did not."""
        deadline = time.monotonic() + grace_s
        while self.live() and time.monotonic() < deadline:
            time.sleep(0.1)
        self._stop.set()
        self._thread.join()
        left = [p for p in self._live.values() if not self._gone(p)]
        for p in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p["pid"], signal.SIGKILL)
        return left


# -- the log, read from outside ----------------------------------------------------------------------

def read_only(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30, isolation_level=None)


def snapshot(db: Path) -> dict[str, Any]:
    """Everything a fresh reader sees: events, sources, and the integrity check's verdict."""
    conn = read_only(db)
    try:
        events = {r[0]: tuple(r[1:]) for r in
                  conn.execute('SELECT id, ts, run_id, kind, payload, "key" FROM events ORDER BY id')}
        sources = dict(conn.execute("SELECT sha256, text FROM sources"))
        integrity = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()
    return {"events": events, "sources": sources, "integrity": "ok" if integrity == ["ok"] else integrity}


class Poller:
    """A reader that polls the log during a cycle: every event it sees was committed before the kill."""

    def __init__(self, db: Path, seen: dict[int, EventRow]) -> None:
        self.db, self.seen = db, seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn = None
        last = max(self.seen, default=0)
        while not self._stop.wait(0.02):
            try:
                if conn is None:
                    if not self.db.exists():
                        continue
                    conn = read_only(self.db)
                for r in conn.execute('SELECT id, ts, run_id, kind, payload, "key" FROM events WHERE id > ? '
                                      'ORDER BY id', (last,)):
                    self.seen[r[0]] = tuple(r[1:])
                    last = r[0]
            except sqlite3.Error:
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def compare(known: dict[int, EventRow], now: dict[int, EventRow]) -> list[int]:
    """Ids of events in `known` that are missing from `now` or differ there."""
    return [i for i, row in known.items() if now.get(i) != row]


def dangling(events: dict[int, EventRow]) -> dict[str, Any]:
    """Intents without a result (interrupted calls), by tool; attempts whose call has no result."""
    results = {json.loads(p).get("intent_id") for _, _, kind, p, _ in events.values() if kind == "tool.result"}
    open_intents: dict[str, int] = {}
    for i, (_, _, kind, p, _) in events.items():
        if kind == "tool.intent" and i not in results:
            tool = json.loads(p).get("tool", "?")
            open_intents[tool] = open_intents.get(tool, 0) + 1
    orphan_attempts = sum(1 for _, _, kind, p, _ in events.values()
                          if kind == "attempt" and json.loads(p).get("intent_id") not in results)
    intents = sum(1 for row in events.values() if row[2] == "tool.intent")
    return {"intents": intents, "without_result": sum(open_intents.values()), "by_tool": open_intents,
            "attempts_without_result": orphan_attempts}


# -- one cycle ----------------------------------------------------------------------------------------

class Bench:
    def __init__(self, home: Path, rng: random.Random) -> None:
        self.home, self.rng = home, rng
        self.db = home / "marathon.db"
        self.token = secrets.token_hex(24)
        self.known: dict[int, EventRow] = {}
        self.known_sources: dict[str, str] = {}
        self.seen: dict[int, EventRow] = {}
        self.acked: dict[int, str] = {}  # event id -> what the client was told it is ("note", "attempt")
        self.lost: set[int] = set()
        self.lost_sources: set[str] = set()
        self.integrity: list[Any] = []
        self.durations: dict[str, list[float]] = {"cold": [], "warm": []}
        self.survivors = Survivors()
        self.cycles: list[dict[str, Any]] = []
        self.call_errors = 0

    def estimate(self, warm: bool) -> float:
        got = self.durations["warm" if warm else "cold"]
        return statistics.median(got) if got else (0.6 if warm else 4.5)

    async def cycle(self, n: int) -> dict[str, Any]:
        rec: dict[str, Any] = {"cycle": n}
        port = free_port()
        t0 = time.monotonic()
        proc = start_server(self.home, port, self.token)
        pgid = proc.pid
        poller = Poller(self.db, self.seen)
        try:
            await wait_listening(proc, port, self.home)
            rec["listen_s"] = round(time.monotonic() - t0, 3)
            # How many profiles finish before the one killed: mostly none (the kill may land in the
            # worker's start), sometimes one or two (the kill lands in a warm worker's job).
            victim = self.rng.choices((0, 1, 2), weights=(0.6, 0.25, 0.15))[0]
            killed = anyio.Event()
            state: dict[str, Any] = {"phase": "connecting", "stage": None}

            async def profiles(c: Client) -> None:
                for k in range(victim + 1):
                    src = candidate(n, k, self.rng)
                    warm = k > 0
                    if k == victim:
                        state["victim_warm"] = warm
                        state["delay"] = self.rng.uniform(0, self.estimate(warm))
                        state["victim_started"] = time.monotonic()
                        state["phase"] = "victim"

                    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                        state["stage"] = message

                    t = time.monotonic()
                    r = await c.call_tool("profile", {"problem": "softmax", "source": src, "shape": "small"},
                                          progress_callback=on_progress)
                    if r.is_error:
                        self.call_errors += 1
                    elif r.structured_content and r.structured_content.get("attempt_id"):
                        self.acked[int(r.structured_content["attempt_id"])] = "attempt"
                    self.durations["warm" if warm else "cold"].append(time.monotonic() - t)
                    if k == victim:
                        state["phase"] = "victim_finished"  # finished before the kill: kill now
                await anyio.sleep_forever()

            async def notes(c: Client) -> None:
                j = 0
                while True:
                    r = await c.call_tool("note", {"text": f"bench_kill cycle {n} note {j}", "tags": ["bench_kill"]})
                    if not r.is_error and r.structured_content:
                        self.acked[int(r.structured_content["id"])] = "note"
                    j += 1
                    await anyio.sleep(self.rng.uniform(0, 0.04))  # leave the CPU to the profile, mostly

            async def run_client() -> None:
                async with client(port, self.token, f"bench-kill-{n}") as c:
                    r = await c.call_tool("list_problems", {})
                    assert not r.is_error, r.content
                    rec["first_call_s"] = round(time.monotonic() - t0, 3)
                    state["phase"] = "calls"
                    async with anyio.create_task_group() as inner:
                        inner.start_soon(profiles, c)
                        inner.start_soon(notes, c)

            async def killer(tg: anyio.abc.TaskGroup) -> None:
                while state["phase"] not in ("victim", "victim_finished"):
                    await anyio.sleep(0.005)
                while state["phase"] == "victim" and time.monotonic() - state["victim_started"] < state["delay"]:
                    await anyio.sleep(0.002)
                os.killpg(pgid, signal.SIGKILL)
                rec["killed_after_s"] = round(time.monotonic() - state["victim_started"], 3)
                rec["victim"] = "warm" if state["victim_warm"] else "cold"
                in_flight = state["phase"] == "victim"
                rec["victim_stage"] = (state["stage"] or "no progress yet") if in_flight else "finished"
                killed.set()
                tg.cancel_scope.cancel()

            with anyio.fail_after(300):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(killer, tg)
                    try:
                        await run_client()
                    except Exception:  # the server died under the call: expected once the kill is sent
                        if not killed.is_set():
                            raise
                        await anyio.sleep_forever()
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            proc.wait()
            killed_at = time.monotonic()
            poller.stop()
        left = related_processes(self.home, {pgid})
        rec["survivors"] = [p["role"] if p["role"] != "other" else p["cmd"][:60] for p in left.values()]
        rec["cycle_s"] = round(time.monotonic() - t0, 3)
        self.survivors.add(left, n, killed_at)
        self.check(rec)
        return rec

    def check(self, rec: dict[str, Any]) -> None:
        snap = snapshot(self.db)
        events = snap["events"]
        lost = compare(self.known, events) + compare(self.seen, events)
        lost += [i for i in self.acked if i not in events]
        self.lost.update(lost)
        self.lost_sources.update(s for s, text in self.known_sources.items() if snap["sources"].get(s) != text)
        self.integrity.append(snap["integrity"])
        rec.update(events=len(events), new_events=len(events) - len(self.known), lost=len(set(lost)),
                   integrity=snap["integrity"], open_intents_total=dangling(events)["without_result"])
        self.known.update(events)
        self.known_sources.update(snap["sources"])

    async def final(self) -> dict[str, Any]:
        """A clean start after the last kill: the log opens, the server answers, then a clean stop."""
        port = free_port()
        t0 = time.monotonic()
        proc = start_server(self.home, port, self.token)
        try:
            await wait_listening(proc, port, self.home)
            before = snapshot(self.db)["events"]
            async with client(port, self.token, "bench-kill-final") as c:
                r = await c.call_tool("attempts", {"problem": "softmax", "limit": 5})
                ok = not r.is_error
            first_call_s = time.monotonic() - t0
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        snap = snapshot(self.db)
        lost = compare(self.known, snap["events"]) + [i for i in self.acked if i not in snap["events"]]
        self.lost.update(lost)
        self.integrity.append(snap["integrity"])
        leftover = related_processes(self.home, {proc.pid})
        self.survivors.add(leftover, -1, time.monotonic())
        # The log opens for writing too (migrations, WAL, views) the way every process opens it.
        from state import EventLog

        with EventLog(self.db) as log:
            opened = log.schema_version
        return {"events_before": len(before), "events_after": len(snap["events"]), "answered": ok,
                "first_call_s": round(first_call_s, 3), "lost": len(set(lost)), "integrity": snap["integrity"],
                "schema_version": opened, "exit_code": proc.returncode,
                "dangling": dangling(snap["events"])}


def spread(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    s = sorted(xs)
    return {"n": len(s), "min": round(s[0], 3), "median": round(statistics.median(s), 3),
            "p90": round(s[min(len(s) - 1, int(0.9 * len(s)))], 3), "max": round(s[-1], 3)}


async def run(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    bench = Bench(home, random.Random(args.seed))
    load_before = os.getloadavg()
    t0 = time.monotonic()
    for n in range(args.cycles):
        rec = await bench.cycle(n)
        bench.cycles.append(rec)
        if args.verbose:
            print(json.dumps(rec), file=sys.stderr, flush=True)
    events_at_last_kill = len(bench.known)
    final = await bench.final()
    left = bench.survivors.finish(args.orphan_grace)
    at_end = related_processes(home, set())
    for p in at_end.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(p["pid"], signal.SIGKILL)
    wall = time.monotonic() - t0
    cycles = bench.cycles
    survived = [p for p in bench.survivors.done if p["cycle"] >= 0]
    lost = len(bench.lost) + len(bench.lost_sources)
    integrity = "ok" if all(i == "ok" for i in bench.integrity) else [i for i in bench.integrity if i != "ok"]
    summary = {
        "bench": "bench_kill", "cycles": len(cycles), "seed": args.seed, "interpreter": use_interpreter(),
        "events_before": events_at_last_kill, "events_after": final["events_after"],
        "lost": lost, "lost_event_ids": sorted(bench.lost)[:50], "lost_sources": len(bench.lost_sources),
        "acknowledged_checked": len(bench.acked),
        "seen_by_live_reader": len(bench.seen),
        "integrity": integrity, "integrity_checks": len(bench.integrity),
        "orphans": len(left) + len(at_end),
        "orphans_detail": [{k: p.get(k) for k in ("cycle", "role", "cmd")} for p in left] + list(at_end.values()),
        "survived_kill": {"processes": len(survived) + len(left),
                          "cycles_with_survivors": sum(1 for c in cycles if c["survivors"]),
                          "roles": _count(p["role"] if p["role"] != "other" else p["cmd"][:60] for p in survived),
                          "linger_s": spread([p["linger_s"] for p in survived])},
        "interrupted": final["dangling"],
        "kills": {"cold_profile": sum(1 for c in cycles if c.get("victim") == "cold"),
                  "warm_profile": sum(1 for c in cycles if c.get("victim") == "warm"),
                  "after_profile_finished": sum(1 for c in cycles if c.get("victim_stage") == "finished"),
                  "killed_after_s": spread([c["killed_after_s"] for c in cycles if "killed_after_s" in c]),
                  "stages": _count(str(c.get("victim_stage")).split(" (")[0] for c in cycles)},
        "profile_s": {k: spread(v) for k, v in bench.durations.items()},
        "call_errors": bench.call_errors,
        "cycle_s": spread([c["cycle_s"] for c in cycles if "cycle_s" in c]),
        "restart_listen_s": spread([c["listen_s"] for c in cycles if "listen_s" in c]),
        "restart_first_call_s": spread([c["first_call_s"] for c in cycles if "first_call_s" in c]),
        "per_cycle_restart_s": [c.get("first_call_s") for c in cycles],
        "attempt_outcomes": _count(json.loads(p).get("outcome") for _, _, kind, p, _ in bench.known.values()
                                   if kind == "attempt"),
        "final": final, "wall_s": round(wall, 1),
        "machine": {"nproc": os.cpu_count(), "arch": os.uname().machine,
                    "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)]},
    }
    return summary


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=100, help="kill -9 cycles (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="seed for kill moments and candidates (default 0)")
    ap.add_argument("--json-out", type=Path, help="also write the summary here")
    ap.add_argument("--home", type=Path, help="MARATHON_HOME to use and keep (default: a temporary one, deleted)")
    ap.add_argument("--orphan-grace", type=float, default=30.0,
                    help="seconds survivors of a kill may take to exit before they count as orphans (default 30)")
    ap.add_argument("--verbose", action="store_true", help="one JSON line per cycle on stderr")
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="marathon-bench-kill-"))
    home.mkdir(parents=True, exist_ok=True)
    try:
        summary = anyio.run(run, args, home)
    finally:
        if args.home is None:
            remove_home(home)
    text = json.dumps(summary, indent=2)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    print(text)
    ok = summary["lost"] == 0 and summary["integrity"] == "ok" and summary["orphans"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
