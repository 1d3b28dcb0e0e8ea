"""Sixteen concurrent HTTP clients against one server: no two timed regions on one GPU may overlap.

    python benchmarks/bench_concurrent.py [--clients 16] [--shape bench] [--json-out PATH] [--home PATH]

Starts `marathon serve --http` on a free loopback port, opens --clients streamable-HTTP MCP clients
at once (each its own session) and has each call `profile` on softmax with a source of its own (the
starter with another NUM_WARPS and a comment naming the client), all released together. Each timed
profile report carries `timing_loop.started_unix` and `.ended_unix` (the wall clock at the start and
end of that job's timed region, measured in the worker); the bench groups the reports by GPU
(device name, plus an index or uuid where the report names one) and checks every pair in a group:
two regions overlap when each starts before the other ends.

Without a GPU the server checks the candidates under the Triton interpreter and times nothing: the
calls still run concurrently and must all come back, and the summary says that no timed region
exists. The log is read afterwards (read-only): one profile intent and one result per client, each
under its own session.

Prints one JSON summary (and writes it to --json-out); exits 1 on a failed call or an overlap.
Run as a script: it shares the server helpers of bench_kill.py beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from bench_kill import (
    STARTER,
    client,
    free_port,
    read_only,
    related_processes,
    remove_home,
    spread,
    start_server,
    use_interpreter,
    wait_listening,
)

WARPS = (1, 2, 4, 8, 16, 32)
IDENTITY_KEYS = ("cuda_visible_devices", "index", "uuid", "pci_bus_id")


def candidate(i: int) -> str:
    return STARTER.replace("NUM_WARPS = 8", f"NUM_WARPS = {WARPS[i % len(WARPS)]}") + \
        f"\n# bench_concurrent client {i}\n"


def device_key(report: dict[str, Any]) -> tuple[str, str | None]:
    """(device name, its index or uuid where the report names one)."""
    dev = report.get("device") or {}
    if not isinstance(dev, dict):
        return str(dev), None
    ident = next((str(dev[k]) for k in IDENTITY_KEYS if dev.get(k) not in (None, "")), None)
    return str(dev.get("name", "?")), ident


def overlaps(regions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs of timed regions on the same device that overlap in wall-clock time."""
    out = []
    for a, b in itertools.combinations(regions, 2):
        if a["device"] != b["device"]:
            continue
        if a["start"] < b["end"] and b["start"] < a["end"]:
            out.append({"clients": [a["client"], b["client"]], "device": a["device"],
                        "overlap_s": round(min(a["end"], b["end"]) - max(a["start"], b["start"]), 6)})
    return out


async def run(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    token = secrets.token_hex(24)
    port = free_port()
    t0 = time.monotonic()
    proc = start_server(home, port, token)
    calls: list[dict[str, Any]] = [{} for _ in range(args.clients)]
    try:
        await wait_listening(proc, port, home)
        listen_s = time.monotonic() - t0
        go = anyio.Event()
        connected = [0]
        t_go = [0.0]

        async def one(i: int) -> None:
            rec = calls[i]
            rec["client"] = i
            try:
                async with client(port, token, f"bench-concurrent-{i}") as c:
                    connected[0] += 1
                    await go.wait()
                    t = time.monotonic()
                    r = await c.call_tool("profile", {"problem": "softmax", "source": candidate(i),
                                                      "shape": args.shape}, read_timeout_seconds=args.call_timeout)
                    rec["wall_s"] = time.monotonic() - t
                    rec["sent_at_s"] = t - t_go[0]
                    rec["is_error"] = bool(r.is_error)
                    rec["report"] = r.structured_content or {}
                    if r.is_error:
                        rec["error"] = " ".join(getattr(p, "text", "") for p in r.content)[:500]
            except Exception as exc:
                rec["is_error"] = True
                rec["error"] = f"{type(exc).__name__}: {exc}"[:500]

        async def release() -> None:
            deadline = time.monotonic() + 120
            while connected[0] < args.clients and time.monotonic() < deadline:
                await anyio.sleep(0.01)
            t_go[0] = time.monotonic()
            go.set()

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for i in range(args.clients):
                tg.start_soon(one, i)
            tg.start_soon(release)
        wall = time.monotonic() - t_go[0]
        connect_s = t_go[0] - started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    regions, untimed, missing_bounds = [], 0, 0
    for rec in calls:
        rep = rec.get("report") or {}
        loop = rep.get("timing_loop") or {}
        if not rep.get("timing"):
            untimed += 1
            continue
        if not isinstance(loop.get("started_unix"), (int, float)) or not isinstance(loop.get("ended_unix"),
                                                                                      (int, float)):
            missing_bounds += 1
            continue
        regions.append({"client": rec["client"], "device": device_key(rep), "start": float(loop["started_unix"]),
                        "end": float(loop["ended_unix"])})
    bad = overlaps(regions)
    failures = [rec for rec in calls if rec.get("is_error") or not (rec.get("report") or {}).get("ok")]

    conn = read_only(home / "marathon.db")
    try:
        rows = [(json.loads(p), k) for p, k in
                conn.execute("SELECT payload, kind FROM events WHERE kind IN ('tool.intent', 'tool.result')")]
    finally:
        conn.close()
    intents = [p for p, k in rows if k == "tool.intent" and p.get("tool") == "profile"]
    results = [p for p, k in rows if k == "tool.result" and p.get("tool") == "profile"]
    devices = sorted({"/".join(x for x in device_key(rec.get("report") or {}) if x) for rec in calls
                      if rec.get("report")})
    identified = all(device_key(rec.get("report") or {})[1] is not None for rec in calls if rec.get("report"))
    busy = sorted(regions, key=lambda r: r["start"])
    leftover = related_processes(home, {proc.pid})
    for p in leftover.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(p["pid"], signal.SIGKILL)
    summary: dict[str, Any] = {
        "bench": "bench_concurrent", "clients": args.clients, "shape": args.shape, "interpreter": use_interpreter(),
        "calls": sum(1 for rec in calls if "wall_s" in rec or "error" in rec),
        "failures": len(failures),
        "failure_detail": [{"client": rec.get("client"), "error": rec.get("error") or
                            (rec.get("report") or {}).get("error"),
                            "error_class": (rec.get("report") or {}).get("error_class")} for rec in failures][:16],
        "timed_regions": len(regions), "untimed_reports": untimed, "timed_without_bounds": missing_bounds,
        "overlaps": len(bad), "overlap_detail": bad[:20],
        "devices": devices,
        "device_identity": "name+index" if identified else "name only (GPUs of one model are grouped together)",
        "note": None if regions else ("no timed regions: no GPU, the candidates were checked under the Triton "
                                      "interpreter and not timed" if use_interpreter() else
                                      "no timed regions came back"),
        "timed_s_sum": round(sum(r["end"] - r["start"] for r in regions), 3) if regions else None,
        "timed_span_s": round(busy[-1]["end"] - busy[0]["start"], 3) if busy else None,
        "gaps_s": spread([b["start"] - a["end"] for a, b in itertools.pairwise(busy)]) if len(busy) > 1 else None,
        "call_wall_s": spread([rec["wall_s"] for rec in calls if "wall_s" in rec]),
        "distinct_attempts": len({(rec.get("report") or {}).get("attempt_id") for rec in calls} - {None}),
        "log": {"profile_intents": len(intents), "profile_results": len(results),
                "sessions": len({p.get("session") for p in intents}),
                "clients": len({p.get("client") for p in intents})},
        "orphans": len(leftover),
        "listen_s": round(listen_s, 3), "connect_s": round(connect_s, 3), "wall_s": round(wall, 3),
        "server_exit_code": proc.returncode,
        "machine": {"nproc": os.cpu_count(), "arch": os.uname().machine,
                    "loadavg_1m": round(os.getloadavg()[0], 2)},
    }
    if regions:
        summary["median_timed_s"] = round(statistics.median(r["end"] - r["start"] for r in regions), 3)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients, one profile each (default 16)")
    ap.add_argument("--shape", default="bench", help="softmax shape to profile at (default bench)")
    ap.add_argument("--json-out", type=Path, help="also write the summary here")
    ap.add_argument("--home", type=Path, help="MARATHON_HOME to use and keep (default: a temporary one, deleted)")
    ap.add_argument("--call-timeout", type=float, default=1800.0,
                    help="each call's own limit in seconds (the calls queue for the GPU; default 1800)")
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="marathon-bench-concurrent-"))
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
    ok = summary["failures"] == 0 and summary["overlaps"] == 0 and summary["calls"] == args.clients
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
