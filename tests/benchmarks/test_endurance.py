"""benchmarks/bench_endurance.py at a tiny size, on the CPU (Triton interpreter): a 40-step scripted run of the
real `marathon run` (its own stdio server), then the same run killed -9 three times and resumed each time,
must end with the same steps, the same attempts and the same best, and leave no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two runs, four client processes and their servers: about 50 s on 2 CPU cores

ROOT = Path(__file__).resolve().parents[2]


def test_forty_steps_three_kills_end_identical(tmp_path: Path) -> None:
    out = tmp_path / "endurance.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}
    for key in ("MARATHON_HOME", "MARATHON_TOKEN", "MARATHON_RUN_ID", "MARATHON_POLICY", "MARATHON_MODEL"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_endurance.py"), "--steps", "40",
                           "--kills", "3", "--seed", "1", "--dir", str(tmp_path), "--json-out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert out.exists(), proc.stderr[-3000:]
    s = json.loads(out.read_text())
    checks = s["comparison"]["checks"]
    assert s["identical"], json.dumps({k: v for k, v in checks.items() if not v["identical"]})[:3000]
    assert proc.returncode == 0
    straight, killed = s["straight"], s["killed"]
    assert straight["steps"] == killed["steps"] == 40 and straight["rc"] == killed["rc"] == 0
    assert checks["server_attempts"]["count"] == checks["client_attempts"]["count"] == [5, 5]
    assert killed["kills_landed"] == 3 and killed["prefix_ok_after_every_kill"]
    assert killed["resumes"] == 3 and straight["resumes"] == 0
    assert straight["best_unverified"] is not None and straight["best_unverified"]["step"] == 25
    assert straight["end"]["state"] == killed["end"]["state"] == "budget"
    assert straight["loop_overhead_ms"]["n"] == 39 and straight["rss_samples"] > 0
    assert s["leftover_processes"] == []
    assert not list(tmp_path.glob("bench_endurance_*")), "the MARATHON_HOMEs were not removed"
