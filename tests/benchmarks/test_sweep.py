"""benchmarks/sweep.py on a machine with no GPU: every variant through the real compile path, logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_sweep(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MARATHON_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sweep.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_compile_only_sweep_rewrites_each_variant_and_logs_it(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    proc = run_sweep(tmp_path, "kernels/softmax/starter.py", "--problem", "softmax", "--compile-only",
                     "--grid", "NUM_WARPS=4,8", "--json-out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [r["config"] for r in rows] == [{"NUM_WARPS": 4}, {"NUM_WARPS": 8}]
    assert all(r["ok"] and r["attempt_id"] for r in rows)
    assert len({r["attempt_id"] for r in rows}) == 2
    assert "softmax_row_kernel" in rows[0]["kernels"][0]

    # --top-from needs timed rows to cross with the new grid: a CPU sweep has none, and says so
    proc = run_sweep(tmp_path, "kernels/softmax/starter.py", "--problem", "softmax", "--compile-only",
                     "--top-from", str(out), "--grid", "NUM_WARPS=2")
    assert proc.returncode != 0 and "no timed variant" in proc.stderr


def test_bad_grid_is_a_clear_error(tmp_path: Path) -> None:
    proc = run_sweep(tmp_path, "kernels/softmax/starter.py", "--problem", "softmax", "--grid", "NUM_WARPS")
    assert proc.returncode != 0 and "--grid wants NAME=v1,v2" in proc.stderr
    # a misspelt name would time the same source again and again: refused
    proc = run_sweep(tmp_path, "kernels/softmax/starter.py", "--problem", "softmax", "--grid", "NUM_WARP=4,8")
    assert proc.returncode != 0 and "no module-level constant named NUM_WARP" in proc.stderr


def test_top_from_takes_the_fastest_distinct_configs_of_the_shape(tmp_path: Path) -> None:
    earlier = tmp_path / "earlier.json"
    rows = [{"shape": "bench", "config": {"NUM_WARPS": 8}, "median_us": 10.0},
            {"shape": "bench", "config": {"NUM_WARPS": 8}, "median_us": 11.0},
            {"shape": "small", "config": {"NUM_WARPS": 2}, "median_us": 1.0},
            {"shape": "bench", "config": {"NUM_WARPS": 4}, "median_us": 12.0}]
    earlier.write_text(json.dumps(rows))
    out = tmp_path / "sweep.json"
    proc = run_sweep(tmp_path, "kernels/softmax/starter.py", "--problem", "softmax", "--compile-only",
                     "--top-from", str(earlier), "--top", "2", "--json-out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["config"] for r in json.loads(out.read_text())] == [{"NUM_WARPS": 8}, {"NUM_WARPS": 4}]
