"""Reading Nsight Compute's CSV, and a clear answer where ncu is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import ncu

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Section Name",'
          '"Metric Name","Metric Unit","Metric Value"')
CSV = "==PROF== Connected to process 1234\n" + HEADER + '''
"0","1234","python3","h","k_main","1","7","Command line profiler metrics","gpu__time_duration.sum","us","10.50"
"0","1234","python3","h","k_main","1","7","Command line profiler metrics","launch__registers_per_thread","r","40"
"1","1234","python3","h","k_combine","1","7","Command line profiler metrics","gpu__time_duration.sum","ns","2,000"
"2","1234","python3","h","k_main","1","7","Command line profiler metrics","gpu__time_duration.sum","us","11.50"
"3","1234","python3","h","k_combine","1","7","Command line profiler metrics","gpu__time_duration.sum","ns","2,200"
'''


def test_summarize_csv_units_and_per_call_total() -> None:
    s = ncu.summarize_csv(CSV, calls=2)
    assert s is not None and s["ok"]
    assert s["kernels"]["k_main"]["gpu_time_us"] == pytest.approx(11.0)
    assert s["kernels"]["k_combine"]["gpu_time_us"] == pytest.approx(2.1)
    assert s["kernels"]["k_main"]["launches"] == 2
    assert s["gpu_time_us_per_call"] == pytest.approx(11.0 + 2.1)


def test_unknown_unit_is_an_error_not_a_wrong_number() -> None:
    with pytest.raises(ValueError, match="unit"):
        ncu.summarize_csv(CSV.replace('"us","10.50"', '"cycle","10.50"'), calls=2)


def test_no_rows_is_none() -> None:
    assert ncu.summarize_csv("==PROF== nothing profiled\n") is None


def test_absent_ncu_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    r = ncu.ncu_metrics("softmax", "def entry(x): pass\n")
    assert r["ok"] is False and "not installed" in r["error"]


def test_profile_text_breaks_ncu_time_down_by_kernel() -> None:
    from server.summaries import profile_text

    s = ncu.summarize_csv(CSV, calls=2)
    assert s is not None
    report = {"ok": True, "correct": True, "problem": "softmax", "shape": "bench", "device": {"name": "H200"},
              "timing": {"median_us": 13.5, "mode": "cuda_graph", "reps": 100, "spread_pct": 1.0},
              "ncu": {**s, "profile_vs_ncu_pct": 3.0}}
    text = profile_text(report)
    main, combine = text.index("k_main: 11.00 us x 1 a call"), text.index("k_combine: 2.10 us x 1 a call")
    assert main < combine  # the costliest kernel first
    assert "40 regs" in text


def test_the_ncu_child_gets_the_candidate_the_target_and_a_clean_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_target's contract with tools.ncu's child, which both the metrics and the hotspots rely on: what the
    command, its environment and its folder are when ncu is started."""
    import json
    import subprocess
    import sys

    from tools.environment import project_root
    from tools.reaped import REAP_GRACE_S, trusted_python

    seen: dict = {}

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.update(cmd=cmd, **kwargs)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(ncu.subprocess, "run", fake_run)
    monkeypatch.setenv("MARATHON_TEST_SECRET", "x")  # the child's environment is scrubbed, not inherited
    work = tmp_path / "work"
    work.mkdir()
    proc = ncu.run_target("/opt/ncu", work, ["--section", "SourceCounters"], 60.0, "softmax", "bench",
                          "# the candidate\n", "cand.py", env={"TRITON_CACHE_DIR": str(work / "tc")}, calls=1)
    assert proc.returncode == 0
    shim = seen["cmd"]  # ncu under tools.reaped, which enforces the limit and reaps what the target starts
    assert shim[:shim.index("--")] == trusted_python("tools.reaped", "60.000")
    argv = shim[shim.index("--") + 1:]
    assert argv[:5] == ["/opt/ncu", "--clock-control", "none", "--section", "SourceCounters"]
    assert argv[argv.index("--nvtx-include") + 1] == "profiled/"
    assert argv[-len(trusted_python("tools.ncu")) - 1:-1] == trusted_python("tools.ncu")
    assert sys.executable in argv
    target = json.loads(Path(argv[-1]).read_text())
    assert target == {"problem": "softmax", "shape": "bench", "candidate": str(work / "cand.py"), "calls": 1}
    assert (work / "cand.py").read_text() == "# the candidate\n"
    assert seen["cwd"] == work and seen["timeout"] == 60.0 + REAP_GRACE_S
    env = seen["env"]
    assert isinstance(env, dict) and env["PYTHONPATH"] == str(project_root())
    assert env["TRITON_CACHE_DIR"] == str(work / "tc") and "MARATHON_TEST_SECRET" not in env


def test_a_report_with_rows_printed_ahead_of_it_is_refused() -> None:
    """Candidate code under ncu shares the profiler's stdout: a header and rows of its own printed first would make
    the real rows read as repeats of its IDs. One header a report, and a kernel's rows together."""
    forged = HEADER + '\n"0","1","p","h","tiny","1","7","x","gpu__time_duration.sum","ns","1"\n'
    with pytest.raises(ncu.MalformedReport, match="header"):
        ncu.summarize_csv(forged + CSV, calls=2)
    apart = CSV + '"0","1234","python3","h","k_main","1","7","x","gpu__time_duration.sum","us","1.0"\n'
    with pytest.raises(ncu.MalformedReport, match="not together"):
        ncu.summarize_csv(apart, calls=2)


def test_ncu_messages_inside_the_report_are_not_rows() -> None:
    s = ncu.summarize_csv(CSV + "==PROF== Disconnected from process 1234\n", calls=2)
    assert s is not None and set(s["kernels"]) == {"k_main", "k_combine"}


def test_a_detached_target_prints_nothing_on_the_stdout_it_inherited(tmp_path: Path) -> None:
    """What runs under ncu writes to a log of its own, through stdout, stderr and any copy of them it holds."""
    import subprocess
    import sys

    log = tmp_path / "target.log"
    code = ("import os, sys\n"
            "copy = os.dup(1)\n"
            "from tools.ncu_run import detach_output\n"
            f"detach_output(__import__('pathlib').Path({str(log)!r}))\n"
            "print('to stdout'); print('to stderr', file=sys.stderr)\n"
            "try:\n"
            "    os.write(copy, b'through a copy')\n"
            "except OSError:\n"
            "    print('copy closed')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""
    assert log.read_text().splitlines() == ["to stdout", "to stderr", "copy closed"]
