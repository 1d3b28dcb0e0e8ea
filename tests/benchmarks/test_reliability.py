"""benchmarks/bench_kill.py and benchmarks/bench_concurrent.py at tiny sizes, on the CPU (Triton interpreter):
each runs a real `marathon serve --http` in a subprocess and must report no lost event and no overlap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # each starts a real server: 7-13 s apiece on 2 CPU cores

ROOT = Path(__file__).resolve().parents[2]


def run_bench(tmp_path: Path, script: str, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / f"{script}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}
    for key in ("MARATHON_HOME", "MARATHON_TOKEN", "MARATHON_RUN_ID"):
        env.pop(key, None)
    # No --home: the script makes a temporary one and removes it with the workers' sandbox folders.
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), *args, "--json-out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.exists(), proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_bench_kill_two_cycles_loses_nothing(tmp_path: Path) -> None:
    proc, s = run_bench(tmp_path, "bench_kill", "--cycles", "2", "--seed", "3")
    assert proc.returncode == 0, json.dumps(s)[:3000]
    assert s["cycles"] == 2 and s["lost"] == 0 and s["integrity"] == "ok" and s["orphans"] == 0
    assert s["events_before"] > 0 and s["events_after"] >= s["events_before"]
    assert s["seen_by_live_reader"] > 0 and s["acknowledged_checked"] > 0
    assert s["final"]["answered"] and s["final"]["exit_code"] == 0
    assert len(s["per_cycle_restart_s"]) == 2 and all(t and t > 0 for t in s["per_cycle_restart_s"])
    # each kill interrupts at most the profile and the note in flight
    assert s["interrupted"]["without_result"] <= 2 * s["cycles"]


def test_bench_concurrent_three_clients_no_overlap(tmp_path: Path) -> None:
    proc, s = run_bench(tmp_path, "bench_concurrent", "--clients", "3", "--shape", "small")
    assert s["calls"] == 3 and s["overlaps"] == 0 and s["orphans"] == 0
    assert s["failures"] == 0, s["failure_detail"]
    assert proc.returncode == 0
    assert s["log"] == {"profile_intents": 3, "profile_results": 3, "sessions": 3, "clients": 3}
    assert s["distinct_attempts"] == 3
    if s["interpreter"]:
        assert s["timed_regions"] == 0 and "no timed regions" in s["note"]
