"""Endurance: a long scripted run of the real `marathon run`, then the same run killed -9 many times.

    python benchmarks/bench_endurance.py [--steps 1000] [--kills 20] [--seed 0] [--json-out PATH] [--dir PATH]

Why: the loop has to stay cheap and flat in memory over a day of tool calls, and a run that is killed
and resumed over and over has to end where the uninterrupted one ends. Both are claims about the whole
product (CLI, client, stdio MCP server, worker pool, event log), so both are measured through it:

1. straight: `marathon run --policy endurance` in a subprocess, on a fresh MARATHON_HOME. The client
   spawns its own `marathon serve` over stdio, as it does for a user. The policy is a script (below):
   no model, no network, each turn a pure function of the step number, so a turn asked again after a
   kill is the same turn. Its tool mix is dominated by cheap calls (log queries, notes, resource reads,
   compile cache hits, baselines), with a profile of a new source every 25 steps (checked on
   the CPU under the Triton interpreter: about 2 s each) and some wrong and broken sources, so the
   run has attempts of every outcome. A sampler reads the client's, the server's and the worker's
   resident size (VmRSS from /proc) twice a second, with the step count at that moment.
2. killed: the same command on another fresh MARATHON_HOME, interrupted --kills times: SIGKILL to the
   client and at once to its server child (the worker pool's processes are left to notice and exit,
   which they must, and are killed after 15 s if they have not), each followed by `marathon resume
   RUN` until the run ends. The kills are spread over the run and land in different places: after a
   chosen step, inside a profile (uniform over 1.2 times its straight-run median), inside whatever call
   is in flight, or during a resumed process's start-up.

The policy is registered under the name "endurance" in the client process by running this file as
`python benchmarks/bench_endurance.py marathon ARGS...`: everything after that is `marathon ARGS...`
(cli.main.main), the real command, with one more policy known to it; resume finds the policy by the
name run.start recorded, as it finds the tuner.

Figures (from the event log, read with a fresh read-only connection, and from the samples):
- loop overhead per step: client time between one call's agent.result and the next call's agent.call
  (the policy, the pinned block, commits, compaction), and the call time not spent in the server's tool
  (tool.intent to tool.result: the stdio round trip, the server's dispatch, the client's handling);
- client, server and worker RSS at 10, 25, 50, 75 % of the steps and at the last step;
- compactions, events, model turns.
Identical (killed against straight): the step count; per step, the tool and its arguments' digest;
the sequence of attempts (step, tool, outcome, error class, source sha256) in the client's records and in
the server's attempt events, one server attempt per judged call; the run's best (`marathon status --json`)
and its best including unverified attempts (on a CPU nothing is verified); model turns; per step, whether
the tool answered ok (but for calls closed as interrupted). Differences that
are the design (steps settled from the log as "recovered", notes closed as "interrupted") are counted.

Prints one JSON summary (and writes it to --json-out); exits 1 if anything that must be identical is not.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from state import keys

ROOT = Path(__file__).resolve().parent.parent

RUN_ID = "endurance"
POLICY = "endurance"
PROBLEM, SHAPE = "softmax", "small"
STARTER = (ROOT / "kernels" / "softmax" / "starter.py").read_text()
WARPS = (1, 2, 4, 8, 16, 32)
SLOW_TOOLS = ("profile", "compile", "baseline")
MARKS = (0.10, 0.25, 0.50, 0.75)


# -- the scripted policy (runs in the client process) --------------------------------------------------

def variant(k: int) -> str:
    """Profiled source number k: every one differs in its tokens (VARIANT), not only in a comment, so
    none is answered from the log as a repeat of another. Each fifth is wrong (a sum off by one), each
    tenth from the seventh on does not load (a name Triton lacks)."""
    src = STARTER.replace("NUM_WARPS = 8", f"NUM_WARPS = {WARPS[k % len(WARPS)]}\nVARIANT = {k}")
    if k % 5 == 3:
        src = src.replace("y = e / tl.sum(e, axis=0)", "y = e / (tl.sum(e, axis=0) + 1.0)")
    elif k % 10 == 7:
        src = src.replace("e = tl.exp(x)", "e = tl.exp_not_in_triton(x)")
    return src


def compiled(j: int) -> str:
    """The two sources compiled over and over: after their first compile, cache hits."""
    return STARTER.replace("NUM_WARPS = 8", f"NUM_WARPS = {(4, 2)[j % 2]}")


def script_calls(step: int) -> list[tuple[str, dict[str, Any]]]:
    """The calls of the turn that starts at `step` (1-based): a pure function of the step."""
    if step % 25 == 0:
        return [("profile", {"problem": PROBLEM, "shape": SHAPE, "source": variant(step // 25)})]
    if step % 50 == 13 and step > 50:  # a source profiled before: the client answers it from the log
        return [("profile", {"problem": PROBLEM, "shape": SHAPE, "source": variant(2 * (step // 50) - 1)})]
    if step % 10 == 4:
        return [("compile", {"problem": PROBLEM, "shape": SHAPE, "source": compiled(step // 10)})]
    if step % 40 == 17:
        return [("baseline", {"problem": PROBLEM, "shape": SHAPE})]
    if step % 6 == 0:  # two calls in one turn: a kill can fall between them
        return [("note", {"text": f"step {step}: idea {step % 17} did not help; " + "details " * 12,
                          "problem": PROBLEM, "tags": ["endurance"]}),
                ("attempts", {"problem": PROBLEM, "limit": 5})]
    if step % 6 == 2:
        return [("note", {"text": f"hypothesis at step {step}", "problem": PROBLEM, "tags": ["hypothesis"]})]
    return [[("list_problems", {}), ("best", {"problem": PROBLEM, "shape": SHAPE}),
             ("read_resource", {"uri": f"problem://{PROBLEM}/description"}),
             ("attempts", {"problem": PROBLEM, "shape": SHAPE, "limit": 3})][step % 4]]


class EndurancePolicy:
    """The scripted model: reads only the step count from the pinned state. Model-free (its compactions
    are built from the log), and it reports a fixed output-token count, so spend is checkable."""

    name = POLICY
    summarizes = False

    def next_turn(self, context: Any) -> Any:
        from client.policy import ToolCall, Turn, Usage

        step = int(context.pinned["step"]) + 1
        calls = tuple(ToolCall(f"e{step}_{i}", name, args) for i, (name, args) in enumerate(script_calls(step)))
        return Turn(text=f"step {step}: {', '.join(c.name for c in calls)}", tool_calls=calls,
                    usage=Usage(0, 20, 0.0), model="endurance-script")


def marathon(argv: list[str]) -> int:
    """`marathon ARGV` with the endurance policy registered (the client process of the bench)."""
    from cli.main import main
    from client.providers import register

    register(POLICY, lambda model, **options: EndurancePolicy())
    return main(argv)


# -- processes ----------------------------------------------------------------------------------------

def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid), or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def rss_kb(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def descendants(root: int) -> list[int]:
    """Live (not zombie) descendants of `root`, parents before children."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None and st[0] not in ("Z", "X"):
                parent[int(entry)] = st[1]
    out, frontier = [], [root]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier and p not in out]
        out += kids
        frontier = kids
    return out


def roles(client_pid: int) -> dict[str, int | None]:
    """The client's server child and the server's worker (the first of each)."""
    kids = descendants(client_pid)
    parent = {p: (_stat(p) or ("", 0))[1] for p in kids}
    server = next((p for p in kids if parent[p] == client_pid and " serve" in _cmdline(p)), None)
    worker = next((p for p in kids if parent[p] == server and "tools.worker" in _cmdline(p)), None)
    return {"client": client_pid, "server": server, "worker": worker}


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def become_subreaper() -> None:
    """Orphans of a killed client (its server, the workers) become this process's children, so they are
    reaped here instead of lingering as zombies under an init that does not reap."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def reap(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def reap_orphans(keep: set[int]) -> None:
    """Reap zombie children of this process that are not Popen's (those are waited for by Popen)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in keep:
            st = _stat(int(entry))
            if st is not None and st[0] == "Z" and st[1] == me:
                reap([int(entry)])


class Sampler:
    """RSS of the client, its server and the server's worker, with the step count, every `every` s."""

    def __init__(self, db: Path, every: float = 0.5) -> None:
        self.db, self.every = db, every
        self.samples: list[dict[str, Any]] = []
        self.pid: int | None = None
        self.keep: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            pid = self.pid
            reap_orphans(self.keep)
            if pid is None or not alive(pid):
                continue
            who = roles(pid)
            steps = steps_done(self.db)
            self.samples.append({"t": time.time(), "pid": pid, "steps": steps,
                                 **{f"{k}_kb": rss_kb(v) for k, v in who.items()}})

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# -- the log, read from outside ----------------------------------------------------------------------

def read_only(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30, isolation_level=None)


def steps_done(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        conn = read_only(db)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM events WHERE run_id = ? AND kind = 'agent.result'",
                                    (RUN_ID,)).fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def open_call(db: Path) -> str | None:
    """The tool of the newest agent.call when it has no agent.result yet (a call in flight), else None."""
    try:
        conn = read_only(db)
        try:
            row = conn.execute("SELECT payload FROM events WHERE run_id = ? AND kind = 'agent.call' "
                               "ORDER BY id DESC LIMIT 1", (RUN_ID,)).fetchone()
            if row is None:
                return None
            call = json.loads(row[0])
            done = conn.execute('SELECT 1 FROM events WHERE "key" = ?',
                                (keys.agent_result(RUN_ID, call["step"]),)).fetchone()
            return None if done else str(call["tool"])
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def load_events(db: Path) -> list[dict[str, Any]]:
    conn = read_only(db)
    try:
        return [{"id": r[0], "ts": r[1], "run_id": r[2], "kind": r[3], "payload": json.loads(r[4]), "key": r[5]}
                for r in conn.execute('SELECT id, ts, run_id, kind, payload, "key" FROM events ORDER BY id')]
    finally:
        conn.close()


def check_prefix(db: Path) -> dict[str, Any]:
    """What must hold after any kill, before the resume: started steps contiguous, no step with two
    results, no result without its call, open calls only in the newest turn."""
    evs = [e for e in load_events(db) if e["run_id"] == RUN_ID]
    calls = [e["payload"]["step"] for e in evs if e["kind"] == "agent.call"]
    results = [e["payload"]["step"] for e in evs if e["kind"] == "agent.result"]
    turns = [e for e in evs if e["kind"] == "model.turn"]
    newest = {c["step"] for c in turns[-1]["payload"]["calls"]} if turns else set()
    open_steps = sorted(set(calls) - set(results))
    ok = (sorted(calls) == list(range(1, len(calls) + 1)) and len(results) == len(set(results))
          and set(results) <= set(calls) and set(open_steps) <= newest)
    return {"ok": ok, "steps_done": len(results), "open_calls": open_steps}


def _step_of_intent(key: str | None) -> int | None:
    """The step of a server intent, from its key: intent:RUN:RUN/STEP:digest."""
    if not key or not key.startswith(keys.intent_prefix(RUN_ID)):
        return None
    call_id = key.split(":")[2]
    tail = call_id.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else None


def status_of(result: dict[str, Any]) -> str:
    """An agent.result's status, "+rerun" where the call was sent again after a restart."""
    return str(result["payload"].get("status", "ok")) + ("+rerun" if result["payload"].get("rerun") else "")


def spread(xs: list[float], scale: float = 1.0, digits: int = 2) -> dict[str, float] | None:
    if not xs:
        return None
    s = sorted(x * scale for x in xs)
    return {"n": len(s), "mean": round(statistics.fmean(s), digits), "median": round(statistics.median(s), digits),
            "p90": round(s[min(len(s) - 1, int(0.9 * len(s)))], digits), "max": round(s[-1], digits)}


def analyse(db: Path, steps_budget: int) -> dict[str, Any]:
    """Everything the comparison and the figures need, from one read of the log."""
    evs = load_events(db)
    own = [e for e in evs if e["run_id"] == RUN_ID]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for e in own:
        by_kind.setdefault(e["kind"], []).append(e)
    calls = {e["payload"]["step"]: e for e in by_kind.get("agent.call", [])}
    results = {e["payload"]["step"]: e for e in by_kind.get("agent.result", [])}
    n_calls, n_results = len(by_kind.get("agent.call", [])), len(by_kind.get("agent.result", []))
    intents = {e["id"]: e for e in by_kind.get("tool.intent", [])}
    server_results = {}
    server_result_counts: dict[int, int] = {}
    for e in by_kind.get("tool.result", []):
        iid = e["payload"].get("intent_id")
        server_results[iid] = e
        server_result_counts[iid] = server_result_counts.get(iid, 0) + 1
    intent_of_step: dict[int, dict[str, Any]] = {}
    for e in intents.values():
        s = _step_of_intent(e["key"])
        if s is not None:
            intent_of_step[s] = e
    sequence = [[s, calls[s]["payload"]["tool"], calls[s]["payload"].get("digest")] for s in sorted(calls)]
    answers = [[s, bool(results[s]["payload"].get("ok")), status_of(results[s])] for s in sorted(results)]
    statuses: dict[str, int] = {}
    for r in results.values():
        st = status_of(r)
        statuses[st] = statuses.get(st, 0) + 1
    client_attempts = []
    for s in sorted(results):
        a = results[s]["payload"].get("attempt")
        if isinstance(a, dict):
            client_attempts.append([s, a.get("tool"), a.get("outcome"), a.get("error_class"), a.get("source_sha")])
    server_attempts, judged = [], {}
    for e in by_kind.get("attempt", []):
        p = e["payload"]
        intent = intents.get(p.get("intent_id"))
        s = _step_of_intent(intent["key"]) if intent else None
        judged[p.get("intent_id")] = judged.get(p.get("intent_id"), 0) + 1
        server_attempts.append([s, p.get("tool"), p.get("outcome"), p.get("error_class"), p.get("source_sha")])
    server_attempts.sort(key=lambda a: (a[0] is None, a[0] or 0))
    # sessions: a gap between two steps that spans a run.resume is a restart, not loop time
    starts = [e["id"] for e in own if e["kind"] in ("run.start", "run.resume")]

    def session(ev_id: int) -> int:
        return sum(1 for s in starts if s <= ev_id)

    gaps, outside, waits, by_tool_wait = [], [], [], {}
    window_gaps: dict[int, list[float]] = {}
    marks = [max(1, round(steps_budget * f)) for f in MARKS] + [steps_budget]
    for s in sorted(results):
        if s not in calls:
            continue
        wait = results[s]["ts"] - calls[s]["ts"]
        if session(calls[s]["id"]) == session(results[s]["id"]):  # a call re-sent after a kill spans a restart
            waits.append(wait)
            by_tool_wait.setdefault(calls[s]["payload"]["tool"], []).append(wait)
        intent = intent_of_step.get(s)
        srv = server_results.get(intent["id"]) if intent else None
        server_s = (srv["ts"] - intent["ts"]) if (intent and srv and session(intent["id"]) == session(calls[s]["id"])
                                                 and srv["id"] < results[s]["id"]) else 0.0
        if results[s]["payload"].get("status") in ("ok", "tool_error", "from_log") and session(
                calls[s]["id"]) == session(results[s]["id"]):
            outside.append(max(0.0, wait - server_s))
        nxt = calls.get(s + 1)
        if nxt is not None and session(nxt["id"]) == session(results[s]["id"]) and nxt["id"] > results[s]["id"]:
            gap = nxt["ts"] - results[s]["ts"]
            gaps.append(gap)
            window = next(i for i, m in enumerate(marks) if s <= m or i == len(marks) - 1)
            window_gaps.setdefault(window, []).append(gap)
    compactions = by_kind.get("compaction", [])
    notes = [e["payload"].get("text") for e in by_kind.get("note", [])]
    session_walls = []
    for i, sid in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else None
        in_session = [e for e in own if e["id"] >= sid and (end is None or e["id"] < end)]
        session_walls.append(in_session[-1]["ts"] - in_session[0]["ts"])
    ends = by_kind.get("run.end", [])
    return {
        "steps": len(results), "steps_started": max(calls, default=0), "n_calls": n_calls, "n_results": n_results,
        "contiguous": sorted(calls) == list(range(1, len(calls) + 1)) and sorted(results) == sorted(calls),
        "sequence": sequence, "answers": answers, "statuses": dict(sorted(statuses.items())),
        "client_attempts": client_attempts, "server_attempts": server_attempts,
        "judged_twice": sum(1 for n in judged.values() if n > 1),
        "server_intents": len(intents),
        "server_intents_without_result": sum(1 for i in intents if i not in server_results),
        "server_results_twice": sum(1 for n in server_result_counts.values() if n > 1),
        "turns": len(by_kind.get("model.turn", [])),
        "tokens_out": sum(int((e["payload"].get("usage") or {}).get("output_tokens") or 0)
                          for e in by_kind.get("model.turn", [])),
        "compactions": len(compactions), "compaction_steps": [c["payload"].get("step") for c in compactions],
        "compaction_share_removed": [c["payload"].get("share_removed") for c in compactions],
        "notes": notes, "notes_count": len(notes), "notes_twice": len(notes) - len(set(notes)),
        "events_run": len(own), "events_db": len(evs),
        "events_by_kind": {k: len(v) for k, v in sorted(by_kind.items())},
        "resumes": len(by_kind.get("run.resume", [])), "end": ends[-1]["payload"] if ends else None,
        "sessions": len(starts), "active_s": round(sum(session_walls), 2),
        "loop_overhead_ms": spread(gaps, 1000),
        "loop_overhead_windows_ms": [{"to_step": marks[i], **(spread(v, 1000) or {})}
                                     for i, v in sorted(window_gaps.items())],
        "call_outside_server_ms": spread(outside, 1000),
        "tool_wait_s": {t: spread(v, 1, 3) for t, v in sorted(by_tool_wait.items())},
        "tool_wait_total_s": round(sum(waits), 2),
    }


def status_json(home: Path) -> dict[str, Any]:
    """`marathon status RUN --json`, the public view of the run (its best among it)."""
    proc = subprocess.run([sys.executable, "-m", "cli", "status", RUN_ID, "--json"], cwd=ROOT,
                          env=client_env(home), capture_output=True, text=True, timeout=120)
    try:
        data: dict[str, Any] = json.loads(proc.stdout)
        return data
    except json.JSONDecodeError:
        return {"error": (proc.stderr or proc.stdout)[-2000:]}


def unverified_best(home: Path) -> dict[str, Any] | None:
    """The run's best counting unverified attempts too (on a CPU none is verified): which source, which step."""
    from state import EventLog

    with EventLog(home / "marathon.db") as log:
        best = log.best(PROBLEM, SHAPE, run_id=RUN_ID, include_unverified=True)
        if best is None:
            return None
        att = log.get(int(best["id"]))
        intent = log.get(int(att.payload["intent_id"])) if att is not None and att.payload.get("intent_id") else None
        return {"step": _step_of_intent(intent.key) if intent is not None else None,
                "source_sha": best.get("source_sha"), "outcome": best.get("outcome"), "tool": best.get("tool"),
                "verified": best.get("verified")}


def best_view(status: dict[str, Any], key: str) -> Any:
    b = status.get(key)
    if not isinstance(b, dict):
        return b
    return {k: b.get(k) for k in ("attempt_number", "step", "source_sha", "outcome", "verified", "median_us")}


# -- running the client -------------------------------------------------------------------------------

def client_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MARATHON_HOME", "MARATHON_TOKEN", "MARATHON_RUN_ID", "MARATHON_POLICY", "MARATHON_MODEL")}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update({"PYTHONPATH": path, "MARATHON_HOME": str(home), "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "",
                "TRITON_CACHE_DIR": str(home / "triton-cache"), "MARATHON_SANDBOX_DIR": str(home / "sandbox")})
    return env


class Client:
    """One `marathon run` / `marathon resume` process; its output goes to files, never to a pipe."""

    def __init__(self, home: Path, argv: list[str], n: int) -> None:
        self.home, self.n = home, n
        self.out, self.err = home / f"client-{n}.out", home / f"client-{n}.err"
        self.started = time.time()
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "marathon", *argv],
                                         cwd=ROOT, env=client_env(home), stdout=out, stderr=err)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def done(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def kill_nine(self, grace_s: float = 15.0) -> dict[str, Any]:
        """SIGKILL the client and its server child; the rest of the tree gets grace_s to exit on its own."""
        tree = descendants(self.pid)
        server = [p for p in tree if (_stat(p) or ("", 0))[1] == self.pid]
        killed_at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        for p in server:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        self.proc.wait()
        rest = [p for p in tree if p not in server]
        while any(alive(p) for p in rest) and time.monotonic() - killed_at < grace_s:
            reap(tree)
            time.sleep(0.05)
        left = [p for p in rest if alive(p)]
        for p in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.05)
        reap(tree)
        return {"tree": len(tree), "outlived_s": round(time.monotonic() - killed_at, 2) if rest else 0.0,
                "killed_after_grace": len(left)}

    def stdout_json(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.out.read_text())
            return data
        except (OSError, json.JSONDecodeError):
            return None


def run_argv(steps: int, compact_at: int | None) -> list[str]:
    argv = ["run", "--problem", PROBLEM, "--shape", SHAPE, "--policy", POLICY, "--max-steps", str(steps),
            "--run-id", RUN_ID, "--json"]
    return argv + (["--compact-at", str(compact_at)] if compact_at else [])


RESUME_ARGV = ["resume", RUN_ID, "--json"]


def wait_for(pred: Any, client: Client, timeout: float, every: float = 0.05) -> bool:
    """Poll `pred` until true; False when the client exited first or the time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        if client.done():
            return False
        time.sleep(every)
    return False


def rss_marks(samples: list[dict[str, Any]], steps: int, one_session: bool = True) -> dict[str, Any]:
    """RSS in MB of each process at the first sample at or after each mark and at the last sample taken
    while the loop ran ("last_step"); "after" is the last sample of all (the client prints its summary
    then, loading the run once more). A run of many sessions: the largest each process reached, since
    each session's processes start afresh."""
    out: dict[str, Any] = {}
    for who in ("client", "server", "worker"):
        key = f"{who}_kb"
        vals = [x[key] / 1024 for x in samples if x.get(key)]
        row: dict[str, float | None] = {"max": round(max(vals), 1) if vals else None}
        if one_session:
            for m in [max(1, round(steps * f)) for f in MARKS]:
                s = next((x for x in samples if x["steps"] >= m and x.get(key)), None)
                row[str(m)] = round(s[key] / 1024, 1) if s else None
            running = next((x for x in reversed(samples) if x["steps"] < steps and x.get(key)), None)
            after = next((x for x in reversed(samples) if x.get(key)), None)
            row["last_step"] = round(running[key] / 1024, 1) if running else None
            row["after"] = round(after[key] / 1024, 1) if after else None
            first = row[str(max(1, round(steps * MARKS[0])))]
            last = row["last_step"]
            row["growth_first_mark_to_last_step"] = round(last - first, 1) if first and last else None
        out[who] = row
    return out



def _finish(client: Any, sampler: Any, timeout: float, t0: float) -> tuple[int, float]:
    """Wait for the last client of a run (killed when over time), then stop sampling and reap what it left:
    its exit code and the wall time from `t0`."""
    sampler.keep.add(client.pid)
    sampler.pid = client.pid
    try:
        rc = client.wait(timeout)
    except subprocess.TimeoutExpired:
        client.kill_nine()
        rc = -9
    wall = time.monotonic() - t0
    sampler.stop()
    reap_orphans(set())
    return rc, wall

def straight(home: Path, steps: int, compact_at: int | None, timeout: float) -> dict[str, Any]:
    home.mkdir(parents=True)
    db = home / "marathon.db"
    sampler = Sampler(db)
    t0 = time.monotonic()
    client = Client(home, run_argv(steps, compact_at), 0)
    rc, wall = _finish(client, sampler, timeout, t0)
    return {"rc": rc, "wall_s": round(wall, 2), "samples": sampler.samples, "client_stderr_tail":
            client.err.read_text()[-1500:] if rc else ""}


def killed(home: Path, steps: int, kills: int, seed: int, compact_at: int | None, timeout: float,
           durations: dict[str, float]) -> dict[str, Any]:
    """The same run, killed `kills` times at spread-out points, resumed after each until it ends."""
    home.mkdir(parents=True)
    db = home / "marathon.db"
    rng = random.Random(seed)
    sampler = Sampler(db)
    t0 = time.monotonic()
    records: list[dict[str, Any]] = []
    client = Client(home, run_argv(steps, compact_at), 0)
    launches = [{"n": 0, "started": client.started, "argv": "run"}]
    stride = steps / (kills + 1)
    for i in range(kills):
        sampler.keep.add(client.pid)
        sampler.pid = client.pid
        mode = ("step", "profile", "any_call", "startup")[i % 4]
        rec: dict[str, Any] = {"n": i + 1, "mode": mode}
        if mode == "startup":
            delay = rng.uniform(0.3, 6.0)
            rec["planned_after_launch_s"] = round(delay, 2)
            while time.time() - client.started < delay and not client.done():
                time.sleep(0.02)
            landed = not client.done()
        else:
            target = max(steps_done(db) + 1, round((i + 1) * stride + rng.uniform(-stride / 3, stride / 3)))
            target = min(target, steps - 1)
            rec["target_step"] = target
            landed = wait_for(lambda t=target: steps_done(db) >= t, client, timeout)
            if landed and mode == "step":
                time.sleep(rng.uniform(0, 0.1))
            elif landed and mode == "profile":
                landed = wait_for(lambda: open_call(db) == "profile", client, timeout)
                if landed:
                    time.sleep(rng.uniform(0, 1.2 * durations.get("profile", 1.5)))
            elif landed:
                landed = wait_for(lambda: open_call(db) is not None, client, timeout, every=0.01)
                if landed:
                    time.sleep(rng.uniform(0, 0.02))
        rec["open_call_at_kill"] = open_call(db)
        if not landed or client.done():
            rec["landed"] = False
            rec["note"] = "the run ended before this kill"
            records.append(rec)
            break
        rec["processes"] = client.kill_nine()
        rec["landed"] = True
        rec["after_launch_s"] = round(time.time() - client.started, 2)
        prefix = check_prefix(db)
        rec.update(steps_done=prefix["steps_done"], open_calls=prefix["open_calls"], prefix_ok=prefix["ok"])
        records.append(rec)
        client = Client(home, RESUME_ARGV, i + 1)
        launches.append({"n": i + 1, "started": client.started, "argv": "resume"})
    rc, wall = _finish(client, sampler, timeout, t0)
    # Restart figures: from a resume's launch to its run.resume event and to its first new step.
    evs = [e for e in load_events(db) if e["run_id"] == RUN_ID]
    restarts = []
    for la, nxt in zip(launches[1:], [*launches[2:], None]):
        resume = next((e for e in evs if e["kind"] == "run.resume" and e["ts"] >= la["started"]
                       and (nxt is None or e["ts"] < nxt["started"])), None)  # None: killed before it
        first = next((e for e in evs if e["kind"] == "agent.result" and resume and e["id"] > resume["id"]), None)
        restarts.append({"to_resume_s": round(resume["ts"] - la["started"], 2) if resume else None,
                         "to_first_step_s": round(first["ts"] - la["started"], 2) if first else None})
    return {"rc": rc, "wall_s": round(wall, 2), "samples": sampler.samples, "kills": records, "launches": len(launches),
            "restarts": restarts, "client_stderr_tail": client.err.read_text()[-1500:] if rc else ""}


# -- comparing ----------------------------------------------------------------------------------------

def first_differences(a: list[Any], b: list[Any], limit: int = 10) -> list[dict[str, Any]]:
    out = []
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            out.append({"index": i, "straight": x, "killed": y})
            if len(out) >= limit:
                break
    return out


def compare(s: dict[str, Any], k: dict[str, Any]) -> dict[str, Any]:
    """Each figure that must be identical: equal or not, and where they first differ."""
    checks: dict[str, Any] = {}
    for name in ("steps", "steps_started", "turns", "tokens_out", "n_calls", "n_results"):
        checks[name] = {"identical": s[name] == k[name], "straight": s[name], "killed": k[name]}
    for name in ("sequence", "client_attempts", "server_attempts"):
        checks[name] = {"identical": s[name] == k[name], "count": [len(s[name]), len(k[name])],
                        "differences": first_differences(s[name], k[name])}
    for name in ("best", "best_unverified"):
        checks[name] = {"identical": s[name] == k[name], "straight": s[name], "killed": k[name]}
    checks["log_invariants"] = {"identical": bool(k["contiguous"] and s["contiguous"] and k["judged_twice"] == 0
                                                  and k["server_results_twice"] == 0 and k["notes_twice"] == 0),
                                "contiguous": [s["contiguous"], k["contiguous"]],
                                "judged_twice": [s["judged_twice"], k["judged_twice"]],
                                "server_results_twice": [s["server_results_twice"], k["server_results_twice"]],
                                "notes_twice": [s["notes_twice"], k["notes_twice"]]}
    # Per step, whether the tool answered ok: identical except where the killed run closed a call as
    # interrupted (a note that was in flight and is not safe to send twice), which is the design.
    killed_status = {a[0]: a[2] for a in k["answers"]}
    ok_s, ok_k = [a[:2] for a in s["answers"]], [a[:2] for a in k["answers"]]
    diffs = first_differences(ok_s, ok_k, limit=len(ok_s) + len(ok_k))
    unexplained = [d for d in diffs if killed_status.get((d["killed"] or d["straight"] or [None])[0]) != "interrupted"]
    checks["answers_ok"] = {"identical": not unexplained, "differences": unexplained[:10],
                            "interrupted_steps": [d["index"] + 1 for d in diffs if d not in unexplained]}
    missing_notes = [n for n in s["notes"] if n not in set(k["notes"])]
    by_design = {"statuses": [s["statuses"], k["statuses"]], "notes": [s["notes_count"], k["notes_count"]],
                 "notes_missing_from_killed": missing_notes[:10],
                 "compactions": [s["compactions"], k["compactions"]],
                 "server_intents_without_result": [s["server_intents_without_result"],
                                                   k["server_intents_without_result"]]}
    return {"identical": all(c["identical"] for c in checks.values()), "checks": checks, "by_design": by_design}


def summarise(side: dict[str, Any], log: dict[str, Any], steps: int) -> dict[str, Any]:
    keep = ("steps", "turns", "compactions", "compaction_steps", "compaction_share_removed", "events_run",
            "events_db", "events_by_kind", "statuses", "resumes", "sessions", "active_s", "loop_overhead_ms",
            "loop_overhead_windows_ms", "call_outside_server_ms", "tool_wait_s", "tool_wait_total_s", "notes_count",
            "server_intents", "server_intents_without_result", "best", "best_unverified", "end")
    out = {k: log[k] for k in keep}
    out["attempts"] = len(log["client_attempts"])
    outcomes: dict[str, int] = {}
    for a in log["client_attempts"]:
        outcomes[f"{a[1]}:{a[2]}"] = outcomes.get(f"{a[1]}:{a[2]}", 0) + 1
    out["attempt_outcomes"] = dict(sorted(outcomes.items()))
    out["wall_s"] = side["wall_s"]
    out["rc"] = side["rc"]
    out["rss_mb"] = rss_marks(side["samples"], steps, one_session=log["sessions"] == 1)
    out["rss_samples"] = len(side["samples"])
    if side.get("client_stderr_tail"):
        out["client_stderr_tail"] = side["client_stderr_tail"]
    return out


def leftovers() -> list[str]:
    return [f"{p} {_cmdline(p)[:100]}" for p in descendants(os.getpid())]


def bench(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    become_subreaper()
    load_before = os.getloadavg()
    t0 = time.monotonic()
    s_home, k_home = folder / "straight", folder / "killed"
    s_side = straight(s_home, args.steps, args.compact_at, args.timeout)
    s_log = analyse(s_home / "marathon.db", args.steps)
    s_status = status_json(s_home)
    s_log["best"], s_log["best_unverified"] = best_view(s_status, "best"), unverified_best(s_home)
    durations = {t: (w or {}).get("median", 1.5) for t, w in s_log["tool_wait_s"].items()}
    k_side = killed(k_home, args.steps, args.kills, args.seed, args.compact_at, args.timeout, durations)
    k_log = analyse(k_home / "marathon.db", args.steps)
    k_status = status_json(k_home)
    k_log["best"], k_log["best_unverified"] = best_view(k_status, "best"), unverified_best(k_home)
    comparison = compare(s_log, k_log)
    landed = [r for r in k_side["kills"] if r.get("landed")]
    settled = {a[0]: a[2] for a in k_log["answers"]}
    for r in landed:
        r["settled_as"] = {str(st): settled.get(st) for st in r.get("open_calls") or []}
    tool_of = {c[0]: c[1] for c in k_log["sequence"]}
    open_settled: dict[str, dict[str, int]] = {}  # each step left open by a kill: how resume settled it, by tool
    for st in sorted({st for r in landed for st in r.get("open_calls") or []}):
        by_tool = open_settled.setdefault(str(settled.get(st)), {})
        by_tool[tool_of.get(st, "?")] = by_tool.get(tool_of.get(st, "?"), 0) + 1
    summary = {
        "bench": "bench_endurance", "steps": args.steps, "kills_planned": args.kills, "seed": args.seed,
        "compact_at": args.compact_at, "identical": comparison["identical"],
        "straight": summarise(s_side, s_log, args.steps),
        "killed": {**summarise(k_side, k_log, args.steps),
                   "kills_landed": len(landed),
                   "kills_by_mode": {m: sum(1 for r in landed if r["mode"] == m)
                                     for m in ("step", "profile", "any_call", "startup")},
                   "open_call_at_kill": [r.get("open_call_at_kill") for r in landed],
                   "open_calls_after_kills": sum(len(r.get("open_calls") or []) for r in landed),
                   "open_calls_settled": open_settled,
                   "prefix_ok_after_every_kill": all(r.get("prefix_ok") for r in landed),
                   "processes_killed_after_grace": sum(r["processes"]["killed_after_grace"] for r in landed),
                   "outlived_kill_s": spread([r["processes"]["outlived_s"] for r in landed
                                              if r["processes"]["outlived_s"]]),
                   "restart_to_first_step_s": spread([r["to_first_step_s"] for r in k_side["restarts"]
                                                      if r["to_first_step_s"] is not None]),
                   "kills": k_side["kills"], "status": {k: k_status.get(k) for k in ("state", "end_state", "steps",
                                                                                      "sessions", "attempts")}},
        "comparison": comparison,
        "status_straight": {k: s_status.get(k) for k in ("state", "end_state", "steps", "sessions", "attempts")},
        "wall_s": round(time.monotonic() - t0, 1),
        "machine": {"nproc": os.cpu_count(), "arch": os.uname().machine, "python": sys.version.split()[0],
                    "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)]},
    }
    summary["leftover_processes"] = leftovers()
    return summary


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "marathon":
        return marathon(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000, help="tool calls in the run (default 1000)")
    ap.add_argument("--kills", type=int, default=20, help="kill -9 and resume cycles in the second run (default 20)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill points (default 0)")
    ap.add_argument("--compact-at", type=int, default=20_000,
                    help="the client's --compact-at in tokens (default 20000: a 1,000-step run of short results "
                         "compacts several times, as a day of long ones would at the default 45%% of the window; "
                         "0: the client's default)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one client process may take (default 3600)")
    ap.add_argument("--json-out", type=Path, help="also write the summary here")
    ap.add_argument("--dir", type=Path, help="where the two MARATHON_HOMEs go (default: the system's temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the MARATHON_HOMEs (their logs, client output)")
    args = ap.parse_args()
    if args.steps < 30 or args.kills < 0:
        ap.error("--steps must be at least 30 (a profile every 25 steps) and --kills at least 0")
    folder = Path(tempfile.mkdtemp(prefix="bench_endurance_", dir=args.dir))
    try:
        summary = bench(args, folder)
    finally:
        for p in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    if args.keep:
        summary["dir"] = str(folder)
    text = json.dumps(summary, indent=2, default=str)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    print(text)
    return 0 if summary["identical"] and summary["straight"]["rc"] == 0 and summary["killed"]["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
