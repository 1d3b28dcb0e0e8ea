"""The MCP server through mcp.Client in memory: tools, errors, progress, cancellation, resources, prompt."""

from __future__ import annotations

import itertools
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import Implementation
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from kernels import get_problem, problem_names
from server.app import build_app
from server.service import Service
from state import EventLog
from tests.server.common import HANGS, REFUSED, STARTER, SYNTAX, TOOLS, WRONG

SESSION = "memory-test-session"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Any]]:
    home = tmp_path_factory.mktemp("mcp_memory")
    service = Service(log=EventLog(home / "marathon.db"), cache_dir=home / "cache")
    app = build_app(service, heartbeat_s=0.2, process_session=SESSION)
    try:
        yield service, app
    finally:
        service.close()


def with_client(app: Any, body: Callable[[Client], Awaitable[Any]], mode: str = "auto") -> Any:
    async def main() -> Any:
        async with Client(app, mode=mode, client_info=Implementation(name="pytest-agent", version="1")) as c:
            return await body(c)

    return anyio.run(main)


def call(app: Any, tool: str, args: dict[str, Any], mode: str = "auto") -> Any:
    return with_client(app, lambda c: c.call_tool(tool, args), mode)


def text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def test_every_tool_is_listed_with_schemas_and_truthful_annotations(served: tuple[Service, Any]) -> None:
    _, app = served
    tools = {t.name: t for t in with_client(app, lambda c: c.list_tools()).tools}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t.input_schema["type"] == "object", t.name
        assert t.output_schema and t.output_schema["type"] == "object", t.name
        assert t.description and t.annotations is not None, t.name
    for name in ("list_problems", "attempts", "best", "attempt"):
        assert tools[name].annotations.read_only_hint is True, name
    for name in ("compile", "profile", "baseline"):
        a = tools[name].annotations
        assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint) == (False, False, True), name
    note = tools["note"].annotations
    assert (note.read_only_hint, note.destructive_hint, note.idempotent_hint) == (False, False, False)
    assert set(tools["compile"].input_schema["required"]) == {"problem", "source"}
    outcome = json.dumps(tools["attempts"].input_schema["properties"]["outcome"])
    assert '"correct"' in outcome and '"compile_error"' in outcome
    defs = tools["profile"].output_schema["$defs"]
    assert defs["Timing"]["properties"]["median_us"]["type"] == "number"
    assert "median_us" in defs["Timing"]["required"]


def test_list_problems_returns_the_suite(served: tuple[Service, Any]) -> None:
    _, app = served
    r = call(app, "list_problems", {})
    assert not r.is_error
    names = [p["name"] for p in r.structured_content["problems"]]
    assert names == problem_names()
    softmax = next(p for p in r.structured_content["problems"] if p["name"] == "softmax")
    assert softmax["tolerance"]["rel_err"] == get_problem("softmax").tolerance.rel_err
    assert "softmax" in text_of(r) and "bench" in text_of(r)


def test_compile_profile_and_the_event_log_tools(served: tuple[Service, Any]) -> None:
    service, app = served
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async def flow(c: Client) -> dict[str, Any]:
        out = {"compile": await c.call_tool("compile", {"problem": "softmax", "source": STARTER},
                                            progress_callback=on_progress)}
        out["profile"] = await c.call_tool("profile", {"problem": "softmax", "source": STARTER})
        out["note"] = await c.call_tool("note", {"text": "one row per program; try two rows",
                                                 "problem": "softmax", "tags": ["hypothesis"]})
        out["page"] = await c.call_tool("attempts", {"problem": "softmax", "limit": 1})
        out["compiled"] = await c.call_tool("attempts", {"problem": "softmax", "outcome": "compiled"})
        out["best"] = await c.call_tool("best", {"problem": "softmax"})
        pid = out["profile"].structured_content["attempt_id"]
        out["attempt"] = await c.call_tool("attempt", {"id": pid})
        return out

    out = with_client(app, flow)
    for name, r in out.items():
        assert not r.is_error, (name, text_of(r))

    comp = out["compile"].structured_content
    assert comp["ok"] and comp["target"] == "cuda:sm_90"
    assert comp["kernels"] and all(isinstance(k["registers"], int) and k["registers"] > 0 for k in comp["kernels"])
    assert "regs" in text_of(out["compile"])
    # The compile takes seconds; the heartbeat (0.2 s here) keeps notifications coming, always increasing.
    assert len(progress) >= 2
    assert all(b[0] > a[0] for a, b in itertools.pairwise(progress))

    prof = out["profile"].structured_content
    assert prof["correct"] is True and prof["error_class"] is None
    assert prof["max_rel_err"] < get_problem("softmax").tolerance.rel_err
    profile_id = prof["attempt_id"]

    page = out["page"].structured_content
    assert [a["id"] for a in page["attempts"]] == [profile_id] and page["next_offset"] == 1
    assert any(n["text"].startswith("one row per program") for n in page["notes"])
    assert "one row per program" in text_of(out["page"])
    assert comp["attempt_id"] in [a["id"] for a in out["compiled"].structured_content["attempts"]]

    best = out["best"].structured_content
    # A CPU check is correct but never verified (no timing, no kernel census), so it is no best.
    assert best["found"] is False and best["best"] is None, best
    assert any(n["tags"] == ["hypothesis"] for n in best["notes"])

    whole = out["attempt"].structured_content
    assert whole["id"] == profile_id and whole["source"] == STARTER
    assert whole["result"]["correct"] is True and whole["result"]["trials"]

    # Every call is in the log with the client's name and the session.
    mine = [e.payload for e in service.log.events(kinds=["tool.intent"]) if e.payload["session"] == SESSION]
    assert {p["tool"] for p in mine} >= {"compile", "profile", "note", "attempts", "best", "attempt"}
    assert {p["client"] for p in mine} == {"pytest-agent"}


@pytest.mark.parametrize(("tool", "args", "error_class", "words"), [
    ("compile", {"problem": "softmax", "source": SYNTAX}, "syntax_error", ["line 2"]),
    ("profile", {"problem": "softmax", "source": WRONG}, "incorrect", ["NOT OK", "details:"]),
    ("profile", {"problem": "softmax", "source": REFUSED}, "rejected", ["flash_attn", "line 1"]),
])
def test_candidate_faults_come_back_as_tool_errors_with_details(
        served: tuple[Service, Any], tool: str, args: dict[str, Any], error_class: str, words: list[str]) -> None:
    _, app = served
    r = call(app, tool, args)
    assert r.is_error
    assert r.structured_content["error_class"] == error_class
    assert r.structured_content["attempt_id"] is not None
    text = text_of(r)
    for w in [error_class, *words]:
        assert w in text, (w, text)
    if error_class == "incorrect":
        assert r.structured_content["max_rel_err"] > get_problem("softmax").tolerance.rel_err


@pytest.mark.parametrize(("tool", "args", "words"), [
    ("profile", {"problem": "no_such", "source": STARTER}, ["unknown problem", "softmax"]),
    ("compile", {"problem": "softmax", "source": STARTER, "shape": "huge"}, ["no shape 'huge'", "bench"]),
    ("best", {"problem": "softmax", "shape": "huge"}, ["no shape 'huge'"]),
    ("profile", {"problem": "softmax", "source": STARTER, "baseline": "nope"}, ["no baseline 'nope'", "torch"]),
    ("attempt", {"id": 10**9}, ["no attempt with id"]),
    ("profile", {"problem": "softmax", "source": "#" * (1 << 20) + "\n"}, ["bytes", "at most"]),
    ("compile", {"problem": "softmax", "source": "def entry(x):\n    return x\x00\n"}, ["NUL"]),
    ("attempts", {"shape": "bench"}, ["shape needs problem"]),
    ("attempts", {"problem": "softmax", "limit": 0}, ["limit"]),
    ("note", {"text": ""}, ["text"]),
])
def test_caller_mistakes_are_tool_errors(served: tuple[Service, Any], tool: str, args: dict[str, Any],
                                         words: list[str]) -> None:
    _, app = served
    r = call(app, tool, args)
    assert r.is_error
    for w in words:
        assert w in text_of(r), (w, text_of(r))


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_client_can_name_its_run_and_session_in_meta(served: tuple[Service, Any], mode: str) -> None:
    service, app = served
    meta = {"kernel-marathon/run": f"run-{mode}", "kernel-marathon/session": f"session-{mode}",
            "kernel-marathon/call_id": f"call-{mode}"}
    r = with_client(app, lambda c: c.call_tool("note", {"text": f"tagged {mode}"}, meta=meta), mode)
    assert not r.is_error
    intent = next(e for e in service.log.events(kinds=["tool.intent"], newest_first=True)
                  if e.payload["tool"] == "note")
    assert (intent.run_id, intent.payload["session"]) == (f"run-{mode}", f"session-{mode}")
    assert f"call-{mode}" in (intent.key or "")
    assert service.log.get(r.structured_content["id"]).run_id == f"run-{mode}"


def test_internal_faults_are_logged_not_leaked(served: tuple[Service, Any], monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    service, app = served

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("SECRET-DETAIL at /srv/internal/path")

    monkeypatch.setattr(service, "attempts", broken)
    with caplog.at_level(logging.ERROR, logger="marathon.server"):
        r = call(app, "attempts", {})
    assert r.is_error
    assert "SECRET" not in text_of(r) and "Traceback" not in text_of(r)
    assert "internal error" in text_of(r) and "incident" in text_of(r)
    logged = "\n".join(rec.getMessage() + (rec.exc_text or "") for rec in caplog.records)
    assert "SECRET-DETAIL" in logged


def test_cancelling_a_call_stops_its_job_and_the_heartbeat_never_goes_quiet(served: tuple[Service, Any]) -> None:
    service, app = served
    restarts = service.pool.restarts
    before = service.log.last_event()
    stamps: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        stamps.append(time.monotonic())

    async def body(c: Client) -> None:
        with anyio.move_on_after(5):
            await c.call_tool("profile", {"problem": "softmax", "source": HANGS}, progress_callback=on_progress)
            raise AssertionError("a candidate that never returns came back")

    with_client(app, body, mode="legacy")
    # The hang reports nothing for seconds; the heartbeat (0.2 s here) still ticks.
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert len(stamps) >= 8 and max(gaps) < 1.5, gaps
    deadline = time.monotonic() + 20
    results: list[Any] = []
    while time.monotonic() < deadline and not results:
        results = [e for e in service.log.events(kinds=["tool.result"], after_id=before.id if before else 0)
                   if e.payload["tool"] == "profile"]
        time.sleep(0.1)
    assert results, "the cancelled call logged no result"
    assert results[0].payload["result"]["error_class"] == "cancelled"
    assert service.pool.restarts > restarts
    assert not call(app, "list_problems", {}).is_error


def test_resources_describe_each_problem_and_the_best_kernel(served: tuple[Service, Any]) -> None:
    service, app = served
    assert not call(app, "profile", {"problem": "softmax", "source": STARTER, "shape": "small"}).is_error
    # A CPU check is never verified; the best is what a GPU verdict logs, written here as the server would.
    sha = service.log.put_source(STARTER)
    service.log.append("attempt", {"problem": "softmax", "shape": "small", "source_sha": sha, "tool": "profile",
                                   "outcome": "correct", "device": "NVIDIA H200", "median_us": 3.5, "speedup": 1.5,
                                   "verified": True, "verification": "judge:v1+bounds+census"})

    async def body(c: Client) -> dict[str, Any]:
        listed = {str(r.uri) for r in (await c.list_resources()).resources}
        templates = {t.uri_template for t in (await c.list_resource_templates()).resource_templates}
        reads = {}
        for uri in ("problem://softmax/description", "problem://softmax/reference", "problem://softmax/starter",
                    "problem://softmax/shapes", "problem://kda/shapes", "best://softmax/small",
                    "best://mla_decode/small"):
            reads[uri] = (await c.read_resource(uri)).contents[0]
        errors = {}
        for uri in ("problem://no_such/description", "best://no_such/bench"):
            try:
                await c.read_resource(uri)
            except MCPError as exc:
                errors[uri] = str(exc)
        return {"listed": listed, "templates": templates, "reads": reads, "errors": errors}

    got = with_client(app, body)
    for name in problem_names():
        for kind in ("description", "reference", "starter", "shapes"):
            assert f"problem://{name}/{kind}" in got["listed"]
        assert f"best://{name}/bench" in got["listed"]
    assert {"problem://{name}/description", "best://{problem}/{shape}"} <= got["templates"]
    reads = got["reads"]
    assert reads["problem://softmax/description"].text == get_problem("softmax").description
    assert reads["problem://softmax/starter"].text == STARTER
    assert reads["problem://softmax/starter"].mime_type == "text/x-python"
    assert "def reference" in reads["problem://softmax/reference"].text
    shapes = json.loads(reads["problem://softmax/shapes"].text)
    assert shapes["shapes"]["bench"] == dict(get_problem("softmax").shapes["bench"])
    assert json.loads(reads["problem://kda/shapes"].text)["name"] == "kda"
    best = reads["best://softmax/small"].text
    assert best.startswith("# best for softmax/small") and best.endswith(STARTER)
    assert "verified judge:v1+bounds+census" in best
    assert "unknown problem" in got["errors"]["problem://no_such/description"]
    assert "unknown problem" in got["errors"]["best://no_such/bench"]
    # Nothing verified for it yet: an explicit "none", not an error.
    assert reads["best://mla_decode/small"].text.startswith("# best for mla_decode/small: none")


def test_optimize_prompt_states_goal_rules_and_tools(served: tuple[Service, Any]) -> None:
    _, app = served

    async def body(c: Client) -> Any:
        prompts = {p.name: p for p in (await c.list_prompts()).prompts}
        got = await c.get_prompt("optimize", {"problem": "mla_decode"})
        try:
            await c.get_prompt("optimize", {"problem": "no_such"})
            bad = None
        except MCPError as exc:
            bad = str(exc)
        return prompts, got, bad

    prompts, got, bad = with_client(app, body)
    args = {a.name: a.required for a in prompts["optimize"].arguments}
    assert args == {"problem": True, "shape": False}
    text = got.messages[0].content.text
    for words in ("mla_decode", "`bench`", "Triton", "torch compute", "kernel libraries", "compile(", "profile(",
                  "note(", "best(", "problem://mla_decode/starter"):
        assert words in text, words
    assert bad is not None and "unknown problem" in bad


def undeclared(schema: dict[str, Any], value: Any, defs: dict[str, Any], path: str = "") -> list[str]:
    """The paths in `value` that `schema` (a published output schema) does not declare: every key of an object
    with properties must be one of them, nested objects and lists of them alike."""
    if "$ref" in schema:
        return undeclared(defs[schema["$ref"].rsplit("/", 1)[-1]], value, defs, path)
    if "anyOf" in schema:
        options = [undeclared(s, value, defs, path) for s in schema["anyOf"] if s.get("type") != "null"]
        return min(options, key=len) if options and value is not None else []
    if isinstance(value, list) and "items" in schema:
        return [p for item in value for p in undeclared(schema["items"], item, defs, path.rstrip(".") + "[].")]
    if not isinstance(value, dict) or "properties" not in schema:
        return []
    props = schema["properties"]
    missing = [path + key for key in value if key not in props]
    return missing + [p for key, v in value.items() if key in props
                      for p in undeclared(props[key], v, defs, f"{path}{key}.")]


def test_every_field_a_tool_returns_is_in_its_output_schema(served: tuple[Service, Any]) -> None:
    _, app = served

    async def body(c: Client) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
        schemas = {t.name: t.output_schema for t in (await c.list_tools()).tools}
        calls = [("list_problems", {}), ("compile", {"problem": "softmax", "source": STARTER, "lines": True}),
                 ("compile", {"problem": "softmax", "source": SYNTAX}),
                 ("profile", {"problem": "softmax", "source": STARTER}),
                 ("profile", {"problem": "softmax", "source": WRONG}),
                 ("profile", {"problem": "softmax", "source": REFUSED}),
                 ("baseline", {"problem": "softmax"}), ("hotspots", {"problem": "softmax", "source": REFUSED}),
                 ("note", {"text": "declared?", "problem": "softmax", "tags": ["t"]}),
                 ("attempts", {"problem": "softmax"}), ("best", {"problem": "softmax"})]
        results = [(tool, (await c.call_tool(tool, args)).structured_content) for tool, args in calls]
        for tool in ("compile", "profile"):
            attempt_id = next(r["attempt_id"] for t, r in results if t == tool)
            results.append(("attempt", (await c.call_tool("attempt", {"id": attempt_id})).structured_content))
        return schemas, results

    schemas, results = with_client(app, body)
    for tool, content in results:
        schema = schemas[tool]
        assert undeclared(schema, content, schema.get("$defs", {})) == [], tool


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_legacy_and_current_protocol_versions(served: tuple[Service, Any], mode: str) -> None:
    _, app = served

    async def body(c: Client) -> tuple[str, Any, set[str], Any]:
        tools = {t.name for t in (await c.list_tools()).tools}
        return c.protocol_version, c.server_info, tools, await c.call_tool("list_problems", {})

    version, info, tools, r = with_client(app, body, mode)
    assert version in (HANDSHAKE_PROTOCOL_VERSIONS if mode == "legacy" else MODERN_PROTOCOL_VERSIONS)
    assert info is not None and info.name == "kernel-marathon"
    assert tools == TOOLS and not r.is_error


def test_results_carry_no_nonfinite_numbers() -> None:
    from server.models import ProfileResult, jsonable

    report = {"problem": "p", "shape": "bench", "ok": False, "max_rel_err": math.inf,
              "trials": [{"rel_err": math.nan}], "timing": None}
    dumped = ProfileResult.model_validate(jsonable(report)).model_dump(mode="json")
    assert dumped["max_rel_err"] is None and dumped["trials"] == [{"rel_err": None}]
    json.dumps(dumped, allow_nan=False)


def test_gpu_shaped_results_validate_and_read_well() -> None:
    """What profile and baseline return on a GPU (timing from tools.timing.summarize), through the models."""
    from server.models import BaselineResult, ProfileResult, jsonable
    from server.summaries import baseline_text, profile_text
    from tools.timing import summarize

    cand = {**summarize([10.0, 10.5, 11.0, 10.2]), "mode": "cuda_graph", "pilot_us": 10.4}
    base = {"name": "torch", **summarize([20.0, 21.0, 19.5]), "mode": "cuda_graph", "pilot_us": 20.1}
    report = {"problem": "softmax", "shape": "bench", "ok": True, "correct": True, "error_class": None,
              "max_rel_err": 1e-7, "timing": cand, "baseline": base, "speedup": base["median_us"] / cand["median_us"],
              "achieved": {"gbps": 3000.0, "tflops": 0.4, "dram_share": 0.7}, "device": {"name": "NVIDIA H200"}}
    model = ProfileResult.model_validate(jsonable(report))
    assert model.timing is not None and model.timing.median_us == cand["median_us"] and model.timing.reps == 4
    assert model.model_dump()["achieved"]["gbps"] == 3000.0
    text = profile_text(report)
    assert f"speedup {report['speedup']:.2f}x" in text and "3000 GB/s" in text and "cuda_graph" in text
    timings = {"eager": {**summarize([30.0, 31.0]), "mode": "eager", "gbps": 1.0, "tflops": 0.1},
               "cuda_graph": {"error": "RuntimeError: capture failed"}}
    baseline = {"problem": "softmax", "shape": "bench", "ok": True, "cached": False, "device": {"name": "H200"},
                "baselines": [{"name": "torch", "description": "eager", "available": True, "correct": True,
                               "max_rel_err": 0.0, "timing": timings}]}
    assert BaselineResult.model_validate(jsonable(baseline)).baselines[0].timing == timings
    assert "[cuda_graph]: failed" in baseline_text(baseline) and "30.50 us" in baseline_text(baseline)


def test_a_field_no_schema_declares_is_refused_under_test_and_dropped_in_service(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from server.models import ProfileResult, UndeclaredFields, published

    report = {"problem": "p", "shape": "bench", "ok": True, "timing": {"median_us": 5.0, "seed": 7}, "extra": 1}
    with pytest.raises(UndeclaredFields, match=r"extra, timing\.seed"):
        published(ProfileResult, report)
    monkeypatch.setenv("MARATHON_STRICT_RESULTS", "0")
    dumped = published(ProfileResult, report).model_dump(mode="json", exclude_none=True)
    assert "extra" not in dumped and dumped["timing"] == {"median_us": 5.0}
    with pytest.raises(ValueError):  # the schema itself is closed, whoever builds a result
        ProfileResult.model_validate(report)


def test_a_gpu_verdict_is_declared_whole() -> None:
    """A timed profile's report, every section the judge and the service add on a GPU, against the schema."""
    from server.models import ProfileResult, jsonable
    from tools.timing import summarize

    cand = {**summarize([10.0, 10.5, 11.0]), "mode": "cuda_graph", "pilot_us": 10.4, "l2": "cold"}
    base = {"name": "torch", **summarize([20.0, 21.0]), "mode": "cuda_graph", "pilot_us": 20.1, "l2": "cold",
            "age_s": 0.0}
    report = {
        "problem": "softmax", "shape": "bench", "device": {"kind": "cuda", "name": "NVIDIA H200"},
        "sandbox": {"process": "fresh per candidate source"}, "shapes_checked": ["bench", "small"],
        "phases": {"spawn_load_s": 0.1, "checks_s": 0.5, "timing_s": 2.0}, "notes": [], "candidate_process": "fresh",
        "trials": [{"shape": "bench", "seed": 1, "ok": True, "max_rel_err": 1e-7}], "output_bytes": 0,
        "output_tail": "", "ok": True, "correct": True, "verified": True, "error_class": None, "error": None,
        "error_line": None, "max_rel_err": 1e-7, "timing": cand, "baseline": base, "speedup": 2.0,
        "achieved": {"gbps": 3000.0, "tflops": 0.4, "dram_share": 0.7, "bf16_share": None, "floor_us": 4.0},
        "ceilings": {"dram_gbps": 4300.0, "bf16_tflops": 700.0}, "telemetry": {"before": None, "after": None},
        "timing_loop": {"wall_s": 1.0, "reps": 3}, "verification": {"by": "judge:v1+bounds+census"},
        "candidate_exit": "kept for a repeat profile of this source", "worker_s": 3.1, "source_sha": "ab" * 32,
        "ncu": {"ok": True, "kernels": {}, "gpu_time_us_per_call": 9.8, "profile_vs_ncu_pct": 7.0},
        "attempt_id": 7}
    schema = ProfileResult.model_json_schema()
    assert undeclared(schema, report, schema["$defs"]) == []
    dumped = ProfileResult.model_validate(jsonable(report)).model_dump(mode="json")
    for key, value in jsonable(report).items():  # each section passes through as reported
        assert dumped[key] == value if not isinstance(value, dict) else dumped[key].items() >= value.items(), key


def test_tracebacks_never_reach_a_client() -> None:
    from server.models import jsonable

    report = {"ok": False, "error": "boom", "internal": "Traceback (most recent call last): ...",
              "baselines": [{"name": "b", "internal": "Traceback ...", "reason": "x"}], "v": float("inf")}
    out = jsonable(report)
    assert "internal" not in out and "internal" not in out["baselines"][0]
    assert out["error"] == "boom" and out["v"] is None
