"""The tuner driven by the real loop and event log, against a fake server that judges a toy kernel at once.

What is checked: a run ends at exactly --max-steps unless the space is exhausted (and then the run's end
reason says so); a resumed run rebuilds its study from the log and goes on exactly as an uninterrupted one
would; failures (compile errors, wrong results, timeouts) are penalised trials and counted; a timed
configuration is profiled again before it leads, and the note that names it gives its confidence; a kernel
without a space falls back to the problem's declared one or says why nothing can be tuned. Last, `marathon
run` end to end on the CPU (slow): the profile checks correctness under the interpreter, with no timing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from client.fingerprint import attempt_key
from client.goal import Budget, Goal
from client.loop import Loop, RunEnd, start_run
from client.mcp_link import CallTimeout, ToolAnswer
from client.policy import Message, ToolSpec, TurnContext
from client.run_projection import AttemptRec
from client.run_status import status_data
from client.search.history import PENALTY, LogHistory
from client.search.optimiser import Optimiser
from client.search.source import Variants, rewrite, tune_space
from client.search.space import SearchSpace
from client.tuner import NEW_BEST, SPACE_EXHAUSTED, TunerPolicy, nothing_to_tune, space_exhausted
from kernels import starter_path
from state import EventLog
from tests.client.common import ROOT, STARTER

TOY = '''"""A toy kernel: three knobs, judged by the fake server below (nothing runs)."""
BLOCK = 32
WARPS = 4
STAGES = 2  # pipeline depth
TUNE_SPACE = {"BLOCK": [8, 16, 32, 64, 128], "WARPS": [1, 2, 4, 8], "STAGES": [1, 2, 3]}
TUNE_CONSTRAINTS = {"a program needs a warp for every 32 columns": "BLOCK <= 32 * WARPS"}


def entry(x):
    return x
'''
SMALL = TOY.replace('"BLOCK": [8, 16, 32, 64, 128], "WARPS": [1, 2, 4, 8], "STAGES": [1, 2, 3]',
                    '"BLOCK": [16, 32, 64, 128], "WARPS": [1, 4], "STAGES": [2]')  # 6 valid of 8
TOY_SPACE, TOY_CURRENT = SearchSpace.from_source(TOY)
FAILS = {(128, 8, 3): "compile_error", (8, 1, 1): "wrong_output", (16, 2, 3): "timeout"}


def toy_time(config: dict[str, Any], call: int) -> float:
    """A smooth landscape (best at BLOCK 64, WARPS 8, STAGES 2) with a little deterministic noise per call."""
    base = 10.0 + 2.0 * abs(TOY_SPACE.knobs[0].index(config["BLOCK"]) - 3) + abs(config["WARPS"] - 8) / 2
    base += abs(config["STAGES"] - 2) * 1.5
    noise = int(hashlib.sha256(f"{sorted(config.items())}{call}".encode()).hexdigest()[:6], 16) / 0xFFFFFF
    return base * (1 + 0.03 * noise)


class FakeServer:
    """The few tools the tuner calls, over an object with the Link's interface: profile judges a variant of
    `kernel` from its knob values; with `attempts`, each profile is also logged as the server's attempt
    event (as a stdio server on the same log does), so another run can read it back."""

    def __init__(self, kernel: str, log: EventLog, run_id: str, *, timed: bool = True, attempts: bool = False,
                 fails: dict[tuple[Any, ...], str] | None = None) -> None:
        self.kernel = kernel
        self.log = log
        self.run_id = run_id
        self.timed = timed
        self.attempts = attempts
        self.fails = FAILS if fails is None else fails
        space, _ = SearchSpace.from_source(kernel)
        self.variants = Variants(kernel, space.names)
        self.profiles: list[dict[str, Any]] = []
        self.tools = [ToolSpec(n, n, {"type": "object"}) for n in ("profile", "best", "note", "attempts")]
        self.annotations: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []

    async def ensure(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def is_safe_to_repeat(self, tool: str) -> bool:
        return tool != "note"

    async def read_resource(self, uri: str, *, timeout: float) -> ToolAnswer:
        return ToolAnswer(True, self.kernel)

    async def call(self, name: str, args: dict[str, Any], *, call_id: str | None, timeout: float) -> ToolAnswer:
        if name == "best":
            return ToolAnswer(True, "nothing correct yet", {"problem": args["problem"], "shape": args["shape"],
                                                              "found": False, "best": None, "notes": []})
        if name == "note":
            self.notes.append(args["text"])
            return ToolAnswer(True, f"noted #{len(self.notes)}", {"id": 10_000 + len(self.notes)})
        assert name == "profile", name
        config = self.variants.config_of(args["source"])
        assert config is not None, "the tuner sent something that is not a variant of its kernel"
        self.profiles.append({"config": config, "options": {k: args[k] for k in ("graph", "baseline") if k in args}})
        failure = self.fails.get(tuple(config.values()))
        timed = self.timed and failure is None  # verified only when timed, as on a GPU (a CPU run has no best)
        if failure == "timeout":
            raise CallTimeout("profile: no answer within 1 s")
        sha = self.log.put_source(args["source"])
        report: dict[str, Any] = {"problem": args["problem"], "shape": args["shape"], "ok": failure is None,
                                  "correct": failure is None, "error_class": failure,
                                  "error": f"{failure} (fake)" if failure else None, "device": {"name": "Fake GPU"},
                                  "source_sha": sha, "verified": failure is None and timed,
                                  "verification": {"by": "judge:v1+bounds"} if failure is None and timed else None}
        if timed:
            t = toy_time(config, len(self.profiles))
            report.update(timing={"median_us": t, "spread_pct": 0.8, "mode": "cuda_graph", "reps": 50},
                          baseline={"name": "torch", "median_us": 40.0}, speedup=40.0 / t)
        if self.attempts:
            timing = report.get("timing") or {}
            report["attempt_id"] = self.log.append("attempt", {
                "problem": args["problem"], "shape": args["shape"], "source_sha": sha, "tool": "profile",
                "outcome": "correct" if failure is None else ("incorrect" if failure == "wrong_output" else failure),
                "error_class": failure, "median_us": timing.get("median_us"), "spread_pct": timing.get("spread_pct"),
                "timing_mode": timing.get("mode"), "device": "Fake GPU", "verified": report["verified"],
                "verification": "judge:v1+bounds" if report["verified"] else None}, run_id=self.run_id).id
        return ToolAnswer(failure is None, "profiled", report)


class Stop(Exception):
    """Raised by a hook to kill a run mid-way, as a crash would (no run.end)."""


def run_toy(log: EventLog, run_id: str, server: FakeServer, *, steps: int, seed: int = 0, resume: bool = False,
            stop_after: int | None = None, extend: dict[str, Any] | None = None, **options: Any) -> RunEnd | None:
    """Drive the tuner through the loop against `server`; with stop_after, kill it after that many results."""
    if not resume:
        start_run(log, run_id, Goal(problem="toy", budget=Budget(steps=steps)), policy="tuner")
    results = {"n": 0}

    def hook(point: str) -> None:
        if point == "result":
            results["n"] += 1
            if stop_after is not None and results["n"] >= stop_after:
                raise Stop

    async def go() -> RunEnd:
        loop = Loop(log, server, TunerPolicy(seed=seed, log=log, **options), run_id, hook=hook)  # type: ignore[arg-type]
        if resume:
            loop.mark_resumed(extend=extend)
        return await loop.run()

    try:
        return anyio.run(go)
    except Stop:
        return None


def calls(log: EventLog, run_id: str, tool: str | None = None) -> list[dict[str, Any]]:
    return [e.payload for e in log.events(run_id=run_id, kinds=["agent.call"]) if tool in (None, e.payload["tool"])]


def profiled(log: EventLog, run_id: str, kernel: str = TOY) -> list[tuple[str, str]]:
    """(configuration, options) of each profile call of a run, in step order, as JSON."""
    space, _ = SearchSpace.from_source(kernel)
    variants = Variants(kernel, space.names)
    out = []
    for c in calls(log, run_id, "profile"):
        config = variants.config_of(c["args"]["source"])
        options = {k: c["args"][k] for k in ("graph", "baseline") if k in c["args"]}
        out.append((json.dumps(config, sort_keys=True), json.dumps(options, sort_keys=True)))
    return out


# -- stopping: exactly N steps, or the space exhausted -------------------------------------------------------------


def test_a_run_ends_at_exactly_max_steps_with_distinct_valid_configurations(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "m.db")
    server = FakeServer(TOY, log, "r")
    end = run_toy(log, "r", server, steps=23)
    assert end is not None and end.state == "budget"
    assert len(calls(log, "r")) == 23 and status_data(log, "r")["steps"] == 23
    plain = [cfg for cfg, opts in profiled(log, "r") if opts == "{}"]
    assert len(plain) == len(set(plain)) and len(plain) >= 15  # no configuration profiled twice as a new trial
    assert all(TOY_SPACE.valid(json.loads(c)) for c in plain)
    assert json.loads(plain[0]) == TOY_CURRENT  # the kernel as it is comes first
    assert [c["tool"] for c in calls(log, "r")[:2]] == ["best", "read_resource"]


def test_an_exhausted_space_ends_the_run_early_and_the_status_says_so(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "m.db")
    server = FakeServer(SMALL, log, "r", timed=False, fails={})  # correct but untimed, as on the CPU
    end = run_toy(log, "r", server, steps=12)
    assert end is not None and end.state == "done"
    tools = [c["tool"] for c in calls(log, "r")]
    assert tools == ["best", "read_resource"] + ["profile"] * 6 + ["note"]  # 9 of 12 steps: nothing left to try
    status = status_data(log, "r")
    assert status["end_state"] == "done" and space_exhausted(status["reason"]), status["reason"]
    assert "all 6 valid configurations of BLOCK, WARPS, STAGES" in status["reason"]
    assert server.notes[0].startswith(SPACE_EXHAUSTED) and "none timed" in server.notes[0]


def test_a_second_run_finds_the_space_tried_in_the_log_and_profiles_nothing(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "m.db")
    run_toy(log, "one", FakeServer(SMALL, log, "one", timed=False, fails={}, attempts=True), steps=12)
    again = FakeServer(SMALL, log, "two", timed=False, fails={}, attempts=True)
    end = run_toy(log, "two", again, steps=12)
    assert end is not None and end.state == "done" and space_exhausted(end.reason)
    assert again.profiles == [] and [c["tool"] for c in calls(log, "two")] == ["best", "read_resource", "note"]


# -- resume: the study rebuilt from the log ------------------------------------------------------------------------


def test_a_resumed_run_proposes_exactly_what_the_uninterrupted_run_did(tmp_path: Path) -> None:
    whole = EventLog(tmp_path / "a.db")
    run_toy(whole, "r", FakeServer(TOY, whole, "r"), steps=26, seed=5)
    killed = EventLog(tmp_path / "b.db")
    assert run_toy(killed, "r", FakeServer(TOY, killed, "r"), steps=26, seed=5, stop_after=12) is None
    assert len(calls(killed, "r")) == 12
    end = run_toy(killed, "r", FakeServer(TOY, killed, "r"), steps=26, seed=5, resume=True)
    assert end is not None and end.state == "budget"
    assert profiled(killed, "r") == profiled(whole, "r")  # same configurations, same re-measures, same order
    assert [c["tool"] for c in calls(killed, "r")] == [c["tool"] for c in calls(whole, "r")]
    other_seed = EventLog(tmp_path / "c.db")
    run_toy(other_seed, "r", FakeServer(TOY, other_seed, "r"), steps=26, seed=6)
    assert profiled(other_seed, "r") != profiled(whole, "r")  # the seed matters, so the equality above says something


def test_the_history_rebuilt_from_the_log_holds_every_trial_once(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "m.db")
    run_toy(log, "r", FakeServer(TOY, log, "r"), steps=30, seed=2)
    history = LogHistory(log, "r", "toy", "bench", TOY_SPACE, Variants(TOY, TOY_SPACE.names))
    history.refresh()
    plain = [cfg for cfg, opts in profiled(log, "r") if opts == "{}"]
    assert [json.dumps(t.config, sort_keys=True) for t in history.trials] == plain
    again = sum(1 for _, opts in profiled(log, "r") if opts != "{}")
    assert sum(len(t.measurements) for t in history.trials) == len(plain) + again
    assert history.refresh() == 0  # nothing new: nothing folded twice


# -- failures and noise --------------------------------------------------------------------------------------------


def test_failures_are_penalised_trials_and_counted(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "m.db")
    server = FakeServer(TOY, log, "r")
    end = run_toy(log, "r", server, steps=200)
    assert end is not None and end.state == "done" and space_exhausted(end.reason)  # every valid one tried
    results = {e.payload["step"]: e.payload for e in log.events(run_id="r", kinds=["agent.result"])}
    statuses = [results[c["step"]]["status"] for c in calls(log, "r", "profile")]
    assert statuses.count("timeout") == 1 and statuses.count("tool_error") == 2
    history = LogHistory(log, "r", "toy", "bench", TOY_SPACE, Variants(TOY, TOY_SPACE.names))
    history.refresh()
    assert len(history.trials) == TOY_SPACE.count()[0] == 51
    failed = {tuple(t.config.values()): t.failure for t in history.trials if t.failed}
    assert failed == {(128, 8, 3): "compile_error", (8, 1, 1): "incorrect", (16, 2, 3): "timeout"}
    optimiser = Optimiser(TOY_SPACE)
    study = optimiser.study(history.trials)  # the study as the next proposal would see it
    penalised = {tuple(optimiser.decode(t.params).values()) for t in study.trials if t.value == PENALTY}
    assert penalised == set(FAILS) and len(study.trials) == 51
    summary = server.notes[-1]
    assert summary.startswith(SPACE_EXHAUSTED)
    assert "48 correct, 3 failed (compile_error 1, incorrect 1, timeout 1)" in summary


def test_a_faster_configuration_is_profiled_again_before_it_leads(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "m.db")
    run_toy(log, "r", FakeServer(TOY, log, "r"), steps=40, seed=1)
    profiles = profiled_with_steps(log, "r")
    notes = [(c["step"], c["args"]["text"]) for c in calls(log, "r", "note")]
    assert len(notes) >= 2, notes  # the best moved at least once after the first
    for step, text in notes:
        assert text.startswith(NEW_BEST) and "median of 2 profiles" in text and "confidence" in text
        config = json.dumps(json.loads(text.rsplit("[config ", 1)[1].rstrip("]")), sort_keys=True)
        before = {opts for at, cfg, opts in profiles if at < step and cfg == config}
        assert before == {"{}", '{"graph": true}'}  # profiled, then again in the same timing mode, then named
    assert any("ahead of the runner-up" in text for _, text in notes[1:])
    first = {cfg: at for at, cfg, opts in reversed(profiles) if opts == "{}"}
    again = [(at, cfg) for at, cfg, opts in profiles if opts != "{}"]
    assert again and all(first[cfg] < at for at, cfg in again)  # a second profile only of a measured one


def profiled_with_steps(log: EventLog, run_id: str) -> list[tuple[int, str, str]]:
    """(step, configuration, options) of each profile call, as JSON."""
    variants = Variants(TOY, TOY_SPACE.names)
    return [(c["step"], json.dumps(variants.config_of(c["args"]["source"]), sort_keys=True),
             json.dumps({k: c["args"][k] for k in ("graph", "baseline") if k in c["args"]}, sort_keys=True))
            for c in calls(log, run_id, "profile")]


def test_without_remeasuring_a_fast_profile_leads_at_once(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "m.db")
    run_toy(log, "r", FakeServer(TOY, log, "r"), steps=20, remeasure=0, notes=False)
    assert [opts for _, opts in profiled(log, "r")] == ["{}"] * 18
    assert "note" not in [c["tool"] for c in calls(log, "r")]


# -- where the search starts ---------------------------------------------------------------------------------------


def _ctx(pinned: dict[str, Any], messages: list[Message] | None = None) -> TurnContext:
    return TurnContext(system="", messages=messages or [Message("user", "goal")], tools=[], pinned=pinned)


def _pinned(problem: str, best_source: str | None, tried: dict[str, AttemptRec] | None = None) -> dict[str, Any]:
    best = {"outcome": "correct", "source": best_source, "attempt_id": 7, "scope": "log"} if best_source else None
    return {"goal": {"problem": problem, "shape": "bench"}, "run_id": "r", "best": best, "tried": tried or {},
            "notes": []}


def test_a_fresh_tuner_skips_what_the_log_has_tried(tmp_path: Path) -> None:
    tried = {}
    space, _ = tune_space(STARTER)
    for warps in space["NUM_WARPS"][:-1]:
        source = rewrite(STARTER, {"NUM_WARPS": warps})
        key = attempt_key("profile", {"problem": "softmax", "shape": "bench", "source": source})
        assert key is not None
        tried[key] = AttemptRec(tool="profile", outcome="correct", ts=0.0)
    turn = TunerPolicy(log=EventLog(tmp_path / "m.db")).next_turn(_ctx(_pinned("softmax", STARTER, tried)))
    assert turn.tool_calls[0].name == "profile"
    assert tune_space(turn.tool_calls[0].arguments["source"])[1] == {"NUM_WARPS": space["NUM_WARPS"][-1]}


def test_a_best_kernel_without_a_space_is_searched_over_the_problems_declared_space(tmp_path: Path) -> None:
    starter = starter_path("mla_decode").read_text()
    cut = starter[:starter.index("# What a tuner may change")] + starter[starter.index("\n\n\n@triton.jit"):]
    assert "TUNE_SPACE" not in cut
    turn = TunerPolicy(log=EventLog(tmp_path / "m.db")).next_turn(_ctx(_pinned("mla_decode", cut)))
    assert [c.name for c in turn.tool_calls] == ["profile"]
    assert "declares no TUNE_SPACE" in turn.text and "over the starter's declared space" in turn.text
    assert tune_space(starter)[1] == SearchSpace.from_source(starter)[1]
    source = turn.tool_calls[0].arguments["source"]
    assert "TUNE_SPACE" not in source and source == cut  # the kernel as it is, first


def test_a_kernel_with_nothing_to_tune_says_why_instead_of_stopping_silently(tmp_path: Path) -> None:
    turn = TunerPolicy(log=EventLog(tmp_path / "m.db")).next_turn(
        _ctx(_pinned("softmax", "def entry(x):\n    return x\n")))
    assert not turn.tool_calls and nothing_to_tune(turn.text) and turn.stop_reason == "end_turn"
    assert "declares no usable TUNE_SPACE" in turn.text and "sets none of the starter's knobs (NUM_WARPS)" in turn.text
    assert "--tune-from starter" in turn.text


def test_tune_from_solution_starts_from_the_solution_without_asking_for_the_best(tmp_path: Path) -> None:
    turn = TunerPolicy(start="solution", log=EventLog(tmp_path / "m.db")).next_turn(_ctx(_pinned("mla_decode", None)))
    assert [c.name for c in turn.tool_calls] == ["profile"] and "the problem's solution" in turn.text
    assert "12 knobs, 159,744 valid configurations" in turn.text
    with pytest.raises(ValueError, match="start must be one of"):
        TunerPolicy(start="anywhere")


# -- end to end --------------------------------------------------------------------------------------------------


def _marathon(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MARATHON_HOME": str(home), "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_marathon_run_with_the_tuner_end_to_end_on_cpu(tmp_path: Path) -> None:
    """The README's main job: a short tuner run that ends with a report; then a second run that finds the
    space already tried in the log, records that, and stops instead of profiling anything again."""
    out = _marathon(tmp_path, "run", "--problem", "softmax", "--policy", "tuner", "--max-steps", "8",
                    "--report", str(tmp_path / "report"), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["state"] == "finished" and data["end_state"] == "budget" and data["steps"] == 8
    # Correct on the CPU, but not verified (no timing, no kernel census there): a CPU run has no best.
    assert data["best"] is None and data["outcomes"] == {"correct": 6}
    folder = Path(data["report"])
    assert folder.is_relative_to(tmp_path / "report") and not (folder / "progress.png").exists()  # nothing timed
    md = (folder / "report.md").read_text()
    for part in ("## Goal", "## Baseline", "## Best kernel", "## Strategies tried", "NUM_WARPS"):
        assert part in md
    lines = [line for line in out.stderr.splitlines() if line.startswith("step ")]
    assert len(lines) == 8 and lines[-1].startswith("step 8/8") and "left 0 steps" in lines[-1]

    again = _marathon(tmp_path, "run", "--problem", "softmax", "--max-steps", "20", "--seed", "4", "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads(again.stdout)
    # No verified best on the CPU: it reads the best (none), then the starter, then notes that all is tried.
    assert second["end_state"] == "done" and second["steps"] == 3 and second["attempts"] == 0, second
    assert space_exhausted(second["reason"]) and "all 6 valid configurations of NUM_WARPS" in second["reason"]
    status = json.loads(_marathon(tmp_path, "status", "--json").stdout)
    assert status["run_id"] == second["run_id"] and status["state"] == "finished"


def test_a_resumed_run_searches_the_kernel_it_began_from_when_the_file_has_changed(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    """Killed mid-way, the run's kernel file edited (another knob value, another kernel), resumed: every profile
    after the resume is still a variant of the kernel the run began with, and none repeats a configuration."""
    import client.tuner as tuner

    log = EventLog(tmp_path / "m.db")
    monkeypatch.setattr(tuner, "kernel_text", lambda problem, kind: TOY)
    assert run_toy(log, "r", FakeServer(TOY, log, "r"), steps=20, stop_after=8, start="solution") is None
    edited = TOY.replace("def entry(", "# edited overnight\ndef entry(", 1)
    assert edited != TOY
    monkeypatch.setattr(tuner, "kernel_text", lambda problem, kind: edited)
    end = run_toy(log, "r", FakeServer(TOY, log, "r"), steps=20, resume=True, start="solution")
    assert end is not None and end.state == "budget"
    plain = [cfg for cfg, opts in profiled(log, "r") if opts == "{}"]
    assert len(plain) == len(set(plain)) and len(plain) >= 12


def test_a_run_ended_by_its_budget_goes_on_under_a_larger_one(tmp_path: Path) -> None:
    """The same run, not a new one: its steps go on from where they ended, the search continues (no configuration
    twice), and the status counts against the new total."""
    log = EventLog(tmp_path / "marathon.db")
    end = run_toy(log, "r", FakeServer(TOY, log, "r"), steps=10)
    assert end is not None and end.state == "budget" and len(calls(log, "r")) == 10
    end = run_toy(log, "r", FakeServer(TOY, log, "r"), steps=10, resume=True, extend={"budget": {"steps": 18}})
    assert end is not None and end.state == "budget", end
    steps = [c["step"] for c in calls(log, "r")]
    assert steps == list(range(1, 19))
    plain = [cfg for cfg, opts in profiled(log, "r") if opts == "{}"]
    assert len(plain) == len(set(plain))
    status = status_data(log, "r")
    assert status["steps"] == 18 and status["end_state"] == "budget"


def _resume_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MARATHON_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "cli", "resume", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_marathon_resume_says_what_a_finished_run_needs(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "marathon.db")
    run_toy(log, "r", FakeServer(TOY, log, "r"), steps=6)
    log.close()
    plain = _resume_cli(tmp_path, "r")
    assert plain.returncode == 0 and "nothing to resume" in plain.stdout and "--max-steps N" in plain.stdout
    spent = _resume_cli(tmp_path, "r", "--max-steps", "6")
    assert spent.returncode == 2, spent.stderr
    assert "the step budget is spent already (6 steps taken): raise it too (--max-steps)" in spent.stderr, spent.stderr
    assert _resume_cli(tmp_path, "r", "--max-steps", "0").returncode == 2
