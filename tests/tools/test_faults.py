"""Every fault a candidate can cause becomes a structured error, and the next job runs normally.

These run the real worker pool: a warm subprocess per test module, the Triton interpreter on CPU
(a real GPU where one is present). Each faulty candidate is the softmax starter with one change.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernels import starter_path
from tools.pool import WorkerPool

STARTER = starter_path("softmax").read_text()
RETURN = "    return out\n"


def variant(old: str, new: str, source: str = STARTER) -> str:
    assert old in source, f"the starter changed: {old!r} not found"
    return source.replace(old, new, 1)


def line_of(source: str, needle: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if needle in line)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory):
    with WorkerPool(root=tmp_path_factory.mktemp("workers")) as p:
        p.warm()
        yield p


def profile(pool: WorkerPool, source: str, timeout: float = 120.0, shape: str = "small") -> dict:
    return pool.run({"op": "profile", "problem": "softmax", "shape": shape, "source": source,
                     "timing": False}, timeout=timeout)


def assert_healthy(pool: WorkerPool) -> None:
    """The job after a fault runs normally on a fresh or surviving worker."""
    r = profile(pool, STARTER)
    assert r["correct"] is True, r


def test_starter_is_correct(pool: WorkerPool) -> None:
    r = profile(pool, STARTER)
    assert r["ok"] and r["correct"], r
    assert r["max_rel_err"] < 1e-5
    assert {t["shape"] for t in r["trials"]} >= {"small", "odd"}
    seeds = [t["seed"] for t in r["trials"]]
    assert len(set(seeds)) == len(seeds), "every trial draws a new seed"


def test_hang_times_out_and_only_the_candidate_process_goes(pool: WorkerPool) -> None:
    """The judge stops a hanging candidate's process itself, before the pool's deadline: the warm judge stays."""
    src = variant(RETURN, "    while True:\n        pass\n" + RETURN)
    restarts = pool.restarts
    r = profile(pool, src, timeout=8.0)
    assert r["error_class"] == "timeout" and r["correct"] is False
    assert "SIGKILL" in r["candidate_exit"] and not r.get("worker_replaced")
    assert pool.restarts == restarts
    assert_healthy(pool)


def test_segfault_is_reported_as_crash(pool: WorkerPool) -> None:
    src = variant("import torch\n", "import os\n\nimport torch\n")
    src = variant(RETURN, "    os.kill(os.getpid(), 11)\n" + RETURN, src)
    r = profile(pool, src)
    assert r["error_class"] == "crashed"
    assert "SIGSEGV" in r["error"]
    assert_healthy(pool)


def test_exception_points_at_candidate_line(pool: WorkerPool) -> None:
    src = variant(RETURN, "    raise ValueError('boom in the candidate')\n" + RETURN)
    r = profile(pool, src)
    assert r["error_class"] == "runtime_error"
    assert "boom in the candidate" in r["error"]
    assert r["error_line"] == line_of(src, "boom in the candidate")
    assert "Traceback" not in r["error"]
    assert_healthy(pool)


def test_output_flood_is_contained(pool: WorkerPool) -> None:
    """80 MB of prints are counted and dropped as they come (a pipe the judge drains), never stored."""
    src = variant(RETURN, "    for _ in range(20):\n        print('x' * (1 << 20))\n" + RETURN)
    r = profile(pool, src)
    assert r["correct"] is True, r
    assert r["output_bytes"] >= 20 * 4 * (1 << 20) and len(r["output_tail"]) <= 2000
    assert_healthy(pool)


def test_small_output_is_captured_not_mixed_into_protocol(pool: WorkerPool) -> None:
    src = variant(RETURN, "    print('hello from the candidate')\n" + RETURN)
    r = profile(pool, src)
    assert r["correct"] is True
    assert "hello from the candidate" in r["output_tail"]


def test_syntax_error_has_line(pool: WorkerPool) -> None:
    src = variant("    rows, cols = x.shape\n", "    rows, cols = x.shape +\n")
    r = profile(pool, src)
    assert r["error_class"] == "syntax_error"
    assert r["error_line"] == line_of(src, "rows, cols = x.shape +")


def test_wrong_shape(pool: WorkerPool) -> None:
    r = profile(pool, variant(RETURN, "    return out[:, :-1]\n"))
    assert r["error_class"] == "wrong_shape" and "shape" in r["error"]


def test_nan_never_passes(pool: WorkerPool) -> None:
    src = variant("    y = e / tl.sum(e, axis=0)\n", "    y = e / tl.sum(e, axis=0) + float('nan')\n")
    r = profile(pool, src)
    assert r["error_class"] == "nan" and r["correct"] is False


def test_wrong_result_is_incorrect(pool: WorkerPool) -> None:
    src = variant("    y = e / tl.sum(e, axis=0)\n", "    y = e / (tl.sum(e, axis=0) * 1.01)\n")
    r = profile(pool, src)
    assert r["error_class"] == "incorrect" and r["max_rel_err"] > 1e-3


def test_input_mutation_is_caught(pool: WorkerPool) -> None:
    src = variant("    tl.store(out_ptr", "    tl.store(x_ptr + row * x_row_stride + offs, y, mask=mask)\n"
                                        "    tl.store(out_ptr")
    r = profile(pool, src)
    assert r["error_class"] == "input_mutated"


def test_results_cached_across_inputs_are_caught(pool: WorkerPool) -> None:
    src = variant("def entry(x: torch.Tensor) -> torch.Tensor:\n",
                  "_CACHE = {}\n\n\ndef entry(x: torch.Tensor) -> torch.Tensor:\n"
                  "    if x.shape in _CACHE:\n        return _CACHE[x.shape]\n")
    src = variant(RETURN, "    _CACHE[x.shape] = out\n" + RETURN, src)
    r = profile(pool, src)
    assert r["correct"] is False and r["error_class"] == "incorrect"
    assert len(r["trials"]) >= 2, "the first trial passes; a later one with fresh inputs must fail"


def test_unwritten_rows_fail(pool: WorkerPool) -> None:
    src = variant("[(rows,)]", "[(rows - 1,)]")
    r = profile(pool, src)
    assert r["correct"] is False and r["error_class"] in {"incorrect", "nan"}


def test_torch_compute_reached_dynamically_is_refused(pool: WorkerPool) -> None:
    src = variant(RETURN, "    return getattr(torch, 'soft' + 'max')(x, -1)\n")
    r = profile(pool, src)
    assert r["error_class"] == "rejected"
    assert "aten::" in r["error"] and "Triton" in r["error"]


def test_kernel_library_imported_dynamically_is_refused(pool: WorkerPool) -> None:
    src = variant(RETURN, "    globals()['__builtins__']['__imp' + 'ort__']('fl' + 'a')\n" + RETURN)
    r = profile(pool, src)
    assert r["error_class"] == "rejected" and "refused" in r["error"]


def test_static_refusal_of_kernel_library(pool: WorkerPool) -> None:
    src = variant("import torch\n", "import torch\nfrom flash_attn import flash_attn_func\n")
    r = profile(pool, src)
    assert r["error_class"] == "rejected"
    assert r["error_line"] == line_of(src, "flash_attn")


def test_side_streams_are_refused(pool: WorkerPool) -> None:
    src = variant(RETURN, "    s = torch.cuda.Stream()\n" + RETURN)
    r = profile(pool, src)
    assert r["error_class"] == "rejected" and "stream" in r["error"].lower()


@pytest.mark.gpu
def test_illegal_memory_access_costs_the_candidate_process_only(pool: WorkerPool) -> None:
    """The fault loses the candidate's CUDA context, in its own process; the judge's context is untouched."""
    src = variant("    tl.store(out_ptr + row * out_row_stride + offs",
                  "    tl.store(out_ptr + (1 << 40) + row * out_row_stride + offs")
    restarts = pool.restarts
    r = profile(pool, src)
    assert r["error_class"] in {"cuda_error", "crashed"} and r["correct"] is False
    assert not r.get("worker_replaced") and pool.restarts == restarts
    assert_healthy(pool)


@pytest.mark.gpu
def test_gpu_profile_times_the_starter(pool: WorkerPool) -> None:
    r = pool.run({"op": "profile", "problem": "softmax", "shape": "bench", "source": STARTER})
    assert r["correct"] and r["timing"]["median_us"] > 0, {k: r.get(k) for k in ("error_class", "error")}
    assert r["speedup"] is not None and r["baseline"]["name"] == "torch"
    assert r["telemetry"]["after"] is not None


def test_inputs_generated_otherwise_are_sent_instead(pool: WorkerPool) -> None:
    """The candidate's process generates its inputs from the judge's seeds; one whose generator was tampered
    with is caught by the checksums and gets the judge's own inputs instead, so its verdict stands on them."""
    src = variant("import torch\n", "import torch\n\n_normal = torch.Tensor.normal_\ntorch.Tensor.normal_ = "
                  "lambda self, mean=0.0, std=1.0, **k: _normal(self, mean, std * 0.5, **k)\n")
    r = profile(pool, src)
    assert r["correct"] is True, r
    assert any("were sent" in note for note in r["notes"]), r["notes"]


def test_cpu_profile_says_no_timing(pool: WorkerPool) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: timing is taken")
    r = profile(pool, STARTER, shape="bench")
    assert r["timing"] is None and r["speedup"] is None
    assert "no timing was taken" in r["timing_note"]
    assert "bench" not in r["shapes_checked"]


def test_worker_env_keeps_triton_caches_and_drops_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted worker must find its compiled kernels and autotuning results (FLA re-autotunes for
    minutes otherwise), and never sees a credential."""
    from tools.pool import worker_env

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    env = worker_env(1, tmp_path)
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton-cache")
    assert env["TRITON_CACHE_AUTOTUNING"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "5" and "TRITON_INTERPRET" not in env
    assert "ANTHROPIC_API_KEY" not in env
    cpu = worker_env(None, tmp_path)
    assert cpu["TRITON_INTERPRET"] == "1" and cpu["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "0")
    assert worker_env(None, tmp_path)["TRITON_CACHE_AUTOTUNING"] == "0"  # a user's choice stands


OWNER = """
import sys, threading, time
from pathlib import Path
from tools.pool import WorkerPool

pool = WorkerPool(root=Path(sys.argv[1]))
print(pool.warm()["pid"], flush=True)
job = {"op": "profile", "problem": "softmax", "shape": "small", "source": sys.argv[2], "timing": False}
threading.Thread(target=pool.run, args=(job,), kwargs={"timeout": 300}, daemon=True).start()
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_server_takes_its_workers_and_candidates_with_it(tmp_path: Path) -> None:
    """The pool starts workers in sessions of their own, so a kill of the server's group misses them: the
    worker notices its parent is gone and ends itself, its zygote and the candidate (here one that hangs)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tools.environment import project_root

    hang = variant(RETURN, "    while True:\n        pass\n" + RETURN)
    env = {**os.environ, "PYTHONPATH": str(project_root())}
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "pool"), hang], stdout=subprocess.PIPE,
                             text=True, env=env, start_new_session=True)
    try:
        assert owner.stdout is not None
        worker = int(owner.stdout.readline())
        time.sleep(3)  # the job is running: the candidate hangs in its first call
        below = [int(p) for p in os.listdir("/proc") if p.isdigit() and _descends_from(int(p), worker)]
        assert below, "the worker should have a zygote and a candidate below it"
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in [worker, *below]):
            time.sleep(0.1)
        survivors = [p for p in [worker, *below] if _alive(p)]
        for p in survivors:  # a failed run must not leave a spinner behind
            os.kill(p, signal.SIGKILL)
        assert not survivors
    finally:
        if owner.poll() is None:
            os.killpg(owner.pid, signal.SIGKILL)


def _descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(16):
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            return False
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


DETACHED_SPINNER = '''
import os

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open("daemon.pid", "w") as f:
            f.write(str(os.getpid()))
        while True:
            pass
    os._exit(0)
'''


def test_a_cancelled_job_takes_every_process_the_candidate_detached(tmp_path: Path) -> None:
    """Cancelling kills the worker (the judge); a spinner the candidate moved into a session of its own, and
    that outlived its parent, must die with it, or it would slow every later measurement."""
    import os
    import threading
    import time

    from tools.pool import sandbox_dir

    src = DETACHED_SPINNER + variant(RETURN, "    while True:\n        pass\n" + RETURN)
    root = tmp_path / "pool"
    cancel = threading.Event()
    with WorkerPool(root=root) as pool:
        pool.warm()
        threading.Timer(4.0, cancel.set).start()
        r = pool.run({"op": "profile", "problem": "softmax", "shape": "small", "source": src, "timing": False},
                     timeout=120, cancel=cancel)
        assert r["error_class"] == "cancelled", r
        pids = [int(p.read_text()) for p in sandbox_dir(root).glob("*/*/work/daemon.pid") if p.read_text()]
        assert pids, "the candidate's spinner should have written its pid"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        survivors = [p for p in pids if _alive(p)]
        for p in survivors:  # a failed run must not leave a spinner behind
            os.kill(p, 9)
        assert not survivors
