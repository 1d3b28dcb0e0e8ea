"""The hostile catalogue (tests/hostile/*.py): one exploit per file, each judged through the real worker pool.

The user of these tools is an agent rewarded by our verdict, so every trick Python allows is assumed. Each
file in tests/hostile is a candidate (`entry(*inputs)` launching Triton kernels) whose docstring states the
trick and the verdict it must get, and whose module-level constants tell this runner how to run it. The
files are never imported here (their import-time code is the exploit): the constants are read from the AST.

Constants of a hostile file:
- PROBLEM (str), SHAPE (str, default "small"), GPU (bool: needs a CUDA GPU; marked `gpu`, skipped without).
- EXPECT: "correct" (a control: must be judged correct), "not_verified" (it may be judged correct only
  without `verified`: torch compute that only a GPU kernel census can see), or a set of acceptable
  error classes, which may hold two special members: "not_verified" as above, and "honest_timing": a
  correct verdict is acceptable when its timing is plausible (MIN_MEDIAN_US, MAX_SPEEDUP).
- ISOLATION: "shared" (a pool shared by this module: the exploit leaves nothing behind), "fresh" (a pool of
  its own, then NEXT in the same pool: the contamination tests), "host" (a pool owned by a separate host
  process running on a copy of the project, so the candidate may kill its pool's owner, read its /proc,
  write the project's files), "service" (server.service.Service over a temporary MARATHON_HOME, HOME and
  XDG dirs; the files there are checked after the profile).
- NEXT: file names run after it in the same pool, each judged by its own EXPECT at this file's PROBLEM and
  SHAPE (and this file's timing limits, when it sets any).
- TIMEOUT (s, per job), JOB (extra fields of the profile job, e.g. {"graph": False}), MIN_MEDIAN_US and
  MAX_SPEEDUP (a timed correct report outside them is a fooled timer).

Whatever EXPECT says, no report may be correct and verified at once for an exploit. A report without a
`verified` field (the tools before verification existed) counts its `correct` as the claim.

Run: `pytest tests/test_hostile.py` (CPU: the Triton interpreter at small shapes, the GPU files skipped);
on a machine with a GPU the same command runs all of them. One file: `-k <name>`. With
MARATHON_HOSTILE_LOG=<file>, every file's verdicts are appended to that file as JSON lines, held or not.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HOSTILE_DIR = Path(__file__).resolve().parent / "hostile"
ROOT = HOSTILE_DIR.parent.parent
SPECIAL = frozenset({"not_verified", "honest_timing"})
ISOLATIONS = frozenset({"shared", "fresh", "host", "service"})
DEFAULT_TIMEOUT_S = 240.0
# What write_state_dir.py writes into every file it can reach, assembled at run time so that its source (which
# the event log stores) does not hold it.
MARKER = b"HOSTILE-WRITE-c0ffee"
# The project folders a host-mode run copies: what the pool, the worker and the candidate process import.
PROJECT_DIRS = ("tools", "kernels", "state")


@dataclass(frozen=True)
class Spec:
    path: Path
    problem: str
    shape: str
    gpu: bool
    expect: str | frozenset[str]
    isolation: str
    next: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT_S
    job: dict[str, Any] = field(default_factory=dict)
    min_median_us: float | None = None
    max_speedup: float | None = None
    docstring: str = ""

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def job_for(self, source: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"op": "profile", "problem": self.problem, "shape": self.shape,
                "source": self.source if source is None else source, **self.job, **(extra or {})}


def _constants(tree: ast.Module) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.isupper():
                try:
                    found[name] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return found


def load_spec(path: Path) -> Spec:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    c = _constants(tree)
    expect = c["EXPECT"]
    if not isinstance(expect, str):
        expect = frozenset(expect)
    return Spec(path=path, problem=c["PROBLEM"], shape=c.get("SHAPE", "small"), gpu=bool(c.get("GPU", False)),
                expect=expect, isolation=c.get("ISOLATION", "shared"), next=tuple(c.get("NEXT", ())),
                timeout=float(c.get("TIMEOUT", DEFAULT_TIMEOUT_S)), job=dict(c.get("JOB", {})),
                min_median_us=c.get("MIN_MEDIAN_US"), max_speedup=c.get("MAX_SPEEDUP"),
                docstring=ast.get_docstring(tree) or "")


SPECS = [load_spec(p) for p in sorted(HOSTILE_DIR.glob("*.py"))]
BY_NAME = {s.path.name: s for s in SPECS}


def _params() -> list[Any]:
    return [pytest.param(s, id=s.name, marks=[pytest.mark.gpu] if s.gpu else []) for s in SPECS]


# -- verdicts -----------------------------------------------------------------------------------------------


def summary(report: dict[str, Any]) -> str:
    timing = report.get("timing") or {}
    return json.dumps({k: report.get(k) for k in ("ok", "correct", "verified", "error_class")}
                      | {"error": str(report.get("error"))[:300], "median_us": timing.get("median_us"),
                         "speedup": report.get("speedup"), "max_rel_err": report.get("max_rel_err")},
                      default=str)


def timing_problems(report: dict[str, Any], min_median_us: float | None, max_speedup: float | None) -> list[str]:
    """Why a correct report's timing is implausible (nothing without timing: the CPU times nothing)."""
    timing = report.get("timing")
    if not timing:
        return []
    found = []
    median = timing.get("median_us")
    if min_median_us is not None and (not isinstance(median, (int, float)) or median < min_median_us):
        found.append(f"median {median} us below the {min_median_us} us this work needs at the least")
    speedup = report.get("speedup")
    if max_speedup is not None and isinstance(speedup, (int, float)) and speedup > max_speedup:
        found.append(f"speedup {speedup:.2f} over the {max_speedup} an honest kernel reaches")
    return found


def on_gpu(report: dict[str, Any]) -> bool:
    """Whether the report comes from a GPU, where an honest kernel can be verified (without one, nothing
    beyond the dispatch guard can check what ran, so a correct verdict may rightly stay unverified)."""
    device = report.get("device")
    if isinstance(device, dict) and device.get("kind"):
        return device.get("kind") == "cuda"
    return bool(report.get("timing"))


def verdict_problems(spec: Spec, report: dict[str, Any], limits: Spec | None = None) -> list[str]:
    """Everything wrong with `report` as the verdict on `spec` (empty: the verdict is the expected one)."""
    limits = limits or spec
    correct = report.get("correct") is True
    verified = report.get("verified", correct) is True  # no field: `correct` is the claim
    cls = report.get("error_class")
    timing_issues = timing_problems(report, limits.min_median_us, limits.max_speedup)
    if spec.expect == "correct":
        found = [] if correct else [f"an honest kernel was not judged correct ({cls})"]
        if correct and "verified" in report and not verified and on_gpu(report):
            found.append("an honest kernel was judged correct but not verified on a GPU")
        return found + (timing_issues if correct else [])
    tokens = frozenset({"not_verified"}) if spec.expect == "not_verified" else spec.expect
    classes = tokens - SPECIAL
    if correct:
        if "honest_timing" in tokens and not timing_issues:
            return []
        if verified:
            claim = "verified" if "verified" in report else "with no `verified` field, so `correct` is the claim"
            return [f"judged correct ({claim}): the exploit worked", *timing_issues]
        if "not_verified" in tokens:
            return []
        return ["judged correct (unverified), expected one of " + ", ".join(sorted(classes))]
    if spec.expect == "not_verified" or cls in classes:
        return []
    return [f"error_class {cls!r}, expected one of {', '.join(sorted(tokens))}"]


def verdict_failures(runs: list[tuple[Spec, dict[str, Any]]], leader: Spec) -> list[str]:
    """One line per wrong verdict in a sequence (the leader first, then its followers)."""
    failures = []
    for i, (spec, report) in enumerate(runs):
        limits = spec if i == 0 else Spec(**{**spec.__dict__, "min_median_us": leader.min_median_us
                                             if leader.min_median_us is not None else spec.min_median_us,
                                             "max_speedup": leader.max_speedup
                                             if leader.max_speedup is not None else spec.max_speedup})
        for problem in verdict_problems(spec, report, limits):
            where = spec.name if i == 0 else f"{spec.name} (run after {leader.name} in the same pool)"
            failures.append(f"{where}: {problem}; report {summary(report)}")
    return failures


def sequence(spec: Spec) -> list[tuple[Spec, dict[str, Any]]]:
    """The leader, then its followers at the leader's problem and shape: (spec, job) pairs in order."""
    followers = [BY_NAME[n] for n in spec.next]
    return [(spec, spec.job_for())] + [(f, {**spec.job_for(f.source), **f.job}) for f in followers]


# -- pools --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tools.pool import WorkerPool

    with WorkerPool(root=tmp_path_factory.mktemp("hostile-pool")) as pool:
        yield pool


def run_in_pool(pool: Any, spec: Spec) -> list[tuple[Spec, dict[str, Any]]]:
    return [(s, pool.run(job, timeout=spec.timeout)) for s, job in sequence(spec)]


def tree_digest(root: Path, skip: tuple[str, ...] = ("__pycache__",)) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if any(part in skip for part in path.relative_to(root).parts) or not path.is_file() or path.is_symlink():
            continue
        out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


HOST_SCRIPT = r"""
import json, sys
from pathlib import Path

spec = json.loads(Path(sys.argv[1]).read_text())
import kernels
root = Path(kernels.__file__).resolve().parent.parent
if str(root) != spec["root"]:
    sys.exit(f"the sandbox copy is not the project in use ({root}); refusing to run a hostile candidate")
from tools.pool import WorkerPool

out = Path(spec["out"])
reports = []
with WorkerPool(root=Path(spec["pool_root"])) as pool:
    for job in spec["jobs"]:
        reports.append(pool.run(job, timeout=spec["timeout"]))
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(reports, default=str))
        tmp.replace(out)
"""


def run_in_host(spec: Spec, tmp_path: Path) -> tuple[list[tuple[Spec, dict[str, Any]]], list[str]]:
    """Run the sequence in a pool owned by a separate host process on a copy of the project.

    The copy makes the project's own files a safe target; the host is the pool's owner, so a candidate that
    kills its parent or reads its /proc entries hits the host, not pytest. The host's environment carries a
    credential-like canary that must not come back in any report. Returns the runs and the problems found
    outside the verdicts (a dead host, files changed, the canary leaked)."""
    copy = tmp_path / "project"
    for name in PROJECT_DIRS:
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    home = tmp_path / "home"
    for d in (home, tmp_path / "mhome", tmp_path / "xdg-cache", tmp_path / "xdg-state"):
        d.mkdir()
    canary = "canary-" + secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "TRITON_HOME", "PYTHONPATH")}
    env.update(PYTHONPATH=str(copy), HOME=str(home), MARATHON_HOME=str(tmp_path / "mhome"),
               XDG_CACHE_HOME=str(tmp_path / "xdg-cache"), XDG_STATE_HOME=str(tmp_path / "xdg-state"),
               MARATHON_HOSTILE_CANARY_API_KEY=canary)
    runs = sequence(spec)
    out = tmp_path / "reports.json"
    request = {"root": str(copy), "pool_root": str(tmp_path / "pool"), "out": str(out),
               "timeout": spec.timeout, "jobs": [job for _, job in runs]}
    (tmp_path / "request.json").write_text(json.dumps(request))
    before = tree_digest(copy)
    problems = []
    try:
        done = subprocess.run([sys.executable, "-c", HOST_SCRIPT, str(tmp_path / "request.json")], cwd=copy,
                              env=env, capture_output=True, text=True, timeout=spec.timeout * len(runs) + 120)
        if done.returncode != 0:
            problems.append(f"the host process that owned the pool ended with {done.returncode}: the candidate "
                            f"reached the trusted side (stderr: {done.stderr[-500:]!r})")
    except subprocess.TimeoutExpired:
        problems.append("the host process that owned the pool hung")
    reports = json.loads(out.read_text()) if out.exists() else []
    if len(reports) < len(runs):
        problems.append(f"only {len(reports)} of {len(runs)} reports came back")
    after = tree_digest(copy)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if changed:
        problems.append(f"the candidate changed the project's files: {changed[:10]}")
    planted = [str(p) for root in (copy, home) for p in root.rglob("*")
               if p.name in ("sitecustomize.py", "usercustomize.py") or p.suffix == ".pth"]
    if planted:
        problems.append(f"start-up hooks were planted: {planted[:10]}")
    leaked = [s.name for (s, _), r in zip(runs, reports) if canary in json.dumps(r, default=str)]
    if leaked:
        problems.append(f"a credential of the pool's owner came back in the report of {leaked}")
    return list(zip([s for s, _ in runs], reports)), problems


def run_in_service(spec: Spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list[str]]:
    """Profile through server.service.Service with a fresh state directory, as in production (its pool and
    Triton cache under the state directory), and check afterwards what the candidate could reach: seeded files
    in the state directory, its caches and $HOME, new files planted beside them, the event log."""
    from server.service import Service
    from state import EventLog

    mhome, home, xdg_cache, xdg_state = (tmp_path / n for n in ("mhome", "home", "xdg-cache", "xdg-state"))
    seeds = {mhome / "token": b"seeded-token-value\n", mhome / "notes.txt": b"seeded note\n",
             mhome / "cache" / "workers" / "triton-cache" / "seed" / "kernel.bin": b"seeded compiled kernel\n",
             home / ".triton" / "cache" / "seed.bin": b"seeded triton cache entry\n",
             xdg_cache / "seed.bin": b"seeded cache entry\n",
             xdg_state / "kernel-marathon" / "seed.bin": b"seeded state entry\n"}
    for path, data in seeds.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    os.chmod(mhome / "token", 0o600)
    watched_dirs = sorted({p.parent for p in seeds} | {mhome, home, xdg_cache, xdg_state})
    before_names = {d: set(os.listdir(d)) for d in watched_dirs}
    monkeypatch.setenv("MARATHON_HOME", str(mhome))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg_cache))
    monkeypatch.setenv("XDG_STATE_HOME", str(xdg_state))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_HOME", raising=False)
    log = EventLog()
    service = Service(log=log)
    runs = []
    problems = []
    try:
        for s, job in sequence(spec):
            report = service.profile(job["problem"], job["source"], job["shape"], timeout=spec.timeout,
                                     **{k: v for k, v in job.items() if k in ("graph", "baseline")})
            runs.append((s, report.as_dict()))  # judged as the pool's answers are: the fields the report set
        shas = {log.put_source(s.source) for s, _ in runs}
        foreign = [a for a in log.attempts(problem=spec.problem, limit=None) if a.get("source_sha") not in shas]
        if foreign:
            problems.append(f"attempts the tools never made are in the log: {foreign[:3]}")
        best = log.best(spec.problem, spec.shape)
        if best is not None and not any(s.expect == "correct" for s, _ in runs):
            problems.append(f"a best attempt exists though no candidate here was correct: {best}")
    except Exception as exc:  # the state the candidate damaged no longer works
        problems.append(f"the service failed after the candidate ran: {type(exc).__name__}: {exc}")
    finally:
        service.close()
    try:
        db = sqlite3.connect(mhome / "marathon.db")
        try:
            integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error as exc:
        integrity = str(exc)
    if integrity != "ok":
        problems.append(f"the event log is damaged: {integrity}")
    for path, data in seeds.items():
        if (path.read_bytes() if path.exists() else None) != data:
            problems.append(f"{path} was changed or removed")
    for d in watched_dirs:
        planted = sorted(set(os.listdir(d)) - before_names[d] - {"marathon.db", "marathon.db-wal",
                                                                  "marathon.db-shm", "cache", "workers"})
        marked = [n for n in planted if (d / n).is_file() and MARKER in (d / n).read_bytes()]
        if marked:
            problems.append(f"the candidate planted {marked} in {d}")
    marked_db = [str(p) for p in mhome.glob("marathon.db*") if MARKER in p.read_bytes()]
    if marked_db:
        problems.append(f"the candidate's marker is in the event log files {marked_db}")
    return runs, problems


def record(spec: Spec, runs: list[tuple[Spec, dict[str, Any]]], failures: list[str]) -> None:
    """With $MARATHON_HOSTILE_LOG set, one JSON line per file: every verdict in its sequence and what was wrong
    (how the catalogue's standing against a version of the tools is written down)."""
    path = os.environ.get("MARATHON_HOSTILE_LOG")
    if path:
        line = {"file": spec.name, "held": not failures, "failures": failures,
                "runs": [{"candidate": s.name, **json.loads(summary(r))} for s, r in runs]}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, default=str) + "\n")


# -- the tests ----------------------------------------------------------------------------------------------


def test_catalogue_is_well_formed() -> None:
    """Every file states its trick and verdict, names a known problem and shape, and passes the static check
    (the run-time design is what must catch these)."""
    from kernels import get_problem
    from tools.guard import static_check

    assert len(SPECS) >= 40
    bad = []
    for s in SPECS:
        if "Expected verdict" not in s.docstring or "Trick" not in s.docstring:
            bad.append(f"{s.name}: the docstring must state the trick and the expected verdict")
        if s.isolation not in ISOLATIONS:
            bad.append(f"{s.name}: unknown ISOLATION {s.isolation!r}")
        if isinstance(s.expect, str) and s.expect not in ("correct", "not_verified"):
            bad.append(f"{s.name}: EXPECT must be 'correct', 'not_verified' or a set, not {s.expect!r}")
        if s.next and s.isolation == "shared":
            bad.append(f"{s.name}: a sequence (NEXT) needs a pool of its own")
        missing = [n for n in s.next if n not in BY_NAME]
        if missing:
            bad.append(f"{s.name}: NEXT names unknown files {missing}")
        try:
            get_problem(s.problem).dims(s.shape)
        except KeyError as exc:
            bad.append(f"{s.name}: {exc}")
        violations = static_check(s.source)
        if violations:
            bad.append(f"{s.name}: refused by the static check ({violations[0].message}); a hostile file "
                       "must get past it so that the run-time layer is what is tested")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("spec", _params())
def test_hostile(spec: Spec, request: pytest.FixtureRequest, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    extra: list[str] = []
    if spec.isolation == "shared":
        runs = run_in_pool(request.getfixturevalue("shared_pool"), spec)
    elif spec.isolation == "fresh":
        from tools.pool import WorkerPool

        with WorkerPool(root=tmp_path / "pool") as pool:
            runs = run_in_pool(pool, spec)
    elif spec.isolation == "host":
        runs, extra = run_in_host(spec, tmp_path)
    else:
        runs, extra = run_in_service(spec, tmp_path, monkeypatch)
    failures = verdict_failures(runs, spec) + extra
    record(spec, runs, failures)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
