"""The `marathon` CLI as a user runs it: a real subprocess, real SQLite, real workers.

The --json shapes asserted here are public schema: scripts and agents parse them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels import problem_names, starter_path

ROOT = Path(__file__).resolve().parents[2]


def marathon(*args: str, home: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MARATHON_HOME": str(home), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    if check and proc.returncode not in (0, 1):
        raise AssertionError(f"marathon {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def test_help_lists_every_command(marathon_home: Path) -> None:
    out = marathon("--help", home=marathon_home).stdout
    for name in ("problems", "log", "compile", "profile", "baseline", "serve"):
        assert name in out
    for name in ("problems", "log", "compile", "profile", "baseline"):
        sub = marathon(name, "--help", home=marathon_home)
        assert sub.returncode == 0 and "usage: marathon" in sub.stdout


def test_help_imports_neither_torch_nor_mcp(marathon_home: Path) -> None:
    """`marathon --help` and every command's --help stay instant: the group lists commands from its registry
    without loading them, and a command loads its heavy modules only when it runs."""
    script = """
import contextlib, io, json, sys
from cli.main import COMMANDS, main
heavy = ("torch", "mcp", "triton", "numpy")
seen = {}
with contextlib.redirect_stdout(io.StringIO()):
    codes = [main(["--help"])]
    seen["--help"] = sorted(m for m in heavy if m in sys.modules)
    for name in COMMANDS:
        codes.append(main([name, "--help"]))
        seen[name] = sorted(m for m in heavy if m in sys.modules)
print(json.dumps({"codes": codes, "seen": seen}))
"""
    env = {**os.environ, "MARATHON_HOME": str(marathon_home), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out["codes"]) == {0}
    assert not any(out["seen"].values()), out["seen"]


def test_bad_usage_is_exit_2_with_the_usage_and_one_error_line(marathon_home: Path) -> None:
    for args, needle in ((("compile", "x.py"), "--problem"), (("nosuch",), "nosuch"),
                         (("profile", "x.py", "--problem", "softmax", "--graph", "sometimes"), "sometimes")):
        r = marathon(*args, home=marathon_home, check=False)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert lines[0].startswith("usage: marathon") and len(lines) == 2 and needle in lines[1], r.stderr
        assert lines[1].startswith(f"marathon{' ' + args[0] if args[0] != 'nosuch' else ''}: error: "), r.stderr
    bare = marathon(home=marathon_home, check=False)
    assert bare.returncode == 2 and "usage: marathon" in bare.stdout and "compile" in bare.stdout


def test_problems_json(marathon_home: Path) -> None:
    data = json.loads(marathon("problems", "--json", home=marathon_home).stdout)
    assert [d["name"] for d in data] == problem_names()
    for d in data:
        assert {"bench", "small"} <= set(d["shapes"]) and d["tolerance"]["rel_err"] > 0


def test_compile_profile_log_json(marathon_home: Path) -> None:
    starter = str(starter_path("softmax"))
    c = json.loads(marathon("compile", starter, "--problem", "softmax", "--json", home=marathon_home).stdout)
    assert {"ok", "target", "kernels", "errors"} <= set(c) and c["ok"]
    assert {"name", "registers", "spill_bytes", "shared_bytes", "uses_wgmma"} <= set(c["kernels"][0])

    p = json.loads(marathon("profile", starter, "--problem", "softmax", "--json", home=marathon_home).stdout)
    assert {"ok", "correct", "error", "max_rel_err", "device", "timing", "speedup"} <= set(p)
    assert p["correct"] is True
    if p["device"]["kind"] == "cpu":
        assert p["timing"] is None
    else:
        assert {"median_us", "spread_pct"} <= set(p["timing"])

    log = json.loads(marathon("log", "--json", "--limit", "50", home=marathon_home).stdout)
    kinds = [e["kind"] for e in log]
    assert kinds.count("attempt") == 2 and kinds.count("tool.intent") == 2 and kinds.count("tool.result") == 2
    assert all({"id", "ts", "run_id", "kind", "payload"} <= set(e) for e in log)
    assert [e["id"] for e in log] == sorted((e["id"] for e in log), reverse=True), "newest first"


def test_failing_candidate_exits_nonzero_with_line(marathon_home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(starter_path("softmax").read_text().replace("    e = tl.exp(x)\n", "    e = tl.exp(nope)\n"))
    r = marathon("compile", str(bad), "--problem", "softmax", home=marathon_home)
    assert r.returncode == 1 and "nope" in r.stdout and "line" in r.stdout


@pytest.mark.parametrize("args, needle", [
    (("compile", "kernels/softmax/starter.py", "--problem", "nosuch"), "unknown problem"),
    (("compile", "kernels/softmax/starter.py", "--problem", "softmax", "--shape", "huge"), "no shape"),
    (("profile", "no/such/file.py", "--problem", "softmax"), "no such file"),
])
def test_bad_arguments_are_clear(marathon_home: Path, args: tuple[str, ...], needle: str) -> None:
    r = marathon(*args, home=marathon_home, check=False)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_export_a_run_as_jsonl(marathon_home: Path, tmp_path: Path) -> None:
    from state import EventLog, read_jsonl

    with EventLog() as log:
        sha = log.put_source("def entry(x): pass\n")
        log.append("note", {"text": "first idea"}, run_id="r-export")
        log.append("attempt", {"problem": "softmax", "shape": "small", "source_sha": sha, "tool": "profile",
                               "outcome": "correct", "device": "cpu"}, run_id="r-export")
        log.append("note", {"text": "another run"}, run_id="r-other")
    out = tmp_path / "run.jsonl"
    r = marathon("export", "r-export", "--out", str(out), home=marathon_home)
    assert r.returncode == 0, r.stderr
    with out.open() as fp:
        events, sources = read_jsonl(fp)
    texts = [e.payload.get("text") for e in events]
    assert "first idea" in texts and "another run" not in texts
    assert {e.run_id for e in events} == {"r-export"}
    assert sources[sha] == "def entry(x): pass\n"
    missing = marathon("export", "nope", home=marathon_home, check=False)
    assert missing.returncode == 2 and "no events" in missing.stderr


@pytest.mark.parametrize("kind", ["png", "directory", "huge", "nul", "missing"])
def test_a_file_that_cannot_be_a_candidate_gets_one_line_and_exit_2(marathon_home: Path, tmp_path: Path,
                                                                    kind: str) -> None:
    """Bad input is the caller's to fix: one line naming the file and the problem, exit 2, no traceback, and
    nothing written to the log."""
    path = tmp_path / f"candidate_{kind}"
    if kind == "png":
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":
        path.write_text("# " + "x" * (2 << 20) + "\n")
    elif kind == "nul":
        path.write_text("def entry(x):\n    return x\x00\n")
    for tool in ("compile", "profile"):
        proc = marathon(tool, str(path), "--problem", "softmax", home=marathon_home, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, proc.stderr
        assert len(lines) == 1 and str(path) in lines[0] and "softmax" in lines[0], proc.stderr
        assert "Traceback" not in proc.stderr
    log = marathon("log", "--json", home=marathon_home)
    assert json.loads(log.stdout) == []


def test_a_compile_that_hangs_stops_at_its_timeout_with_progress(marathon_home: Path, tmp_path: Path) -> None:
    """`--timeout` bounds the whole compile; progress lines come while it waits; the log keeps the call."""
    import time

    source = starter_path("softmax").read_text().replace("    return out\n", "    while True:\n        pass\n", 1)
    assert source != starter_path("softmax").read_text()
    path = tmp_path / "hang.py"
    path.write_text(source)
    started = time.monotonic()
    proc = marathon("compile", str(path), "--problem", "softmax", "--shape", "small", "--timeout", "30",
                    home=marathon_home)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1 and "took longer than" in proc.stdout, proc.stdout + proc.stderr
    assert "running for" in proc.stderr  # a progress line while it waited
    assert elapsed < 60
    events = json.loads(marathon("log", "--json", home=marathon_home).stdout)
    assert {e["kind"] for e in events} >= {"tool.intent", "tool.result", "attempt"}
