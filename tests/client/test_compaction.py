"""Compaction: it triggers at the threshold, removes a real share, keeps the goal, hides and never deletes.

Runs are driven by scripted policies whose turns read a long resource and write a note, so the
conversation grows by several hundred tokens a turn and crosses a small threshold several times.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import anyio

from client.compaction import SUMMARY_REQUEST, CompactionConfig
from client.loop import Loop, LoopOptions
from client.mcp_link import Link, ServerSpec
from client.policy import ToolCall, Turn, TurnContext, Usage
from client.transcript import estimate_tokens
from state import EventLog
from tests.client.common import Scripted, check_invariants, drive, in_process, new_run

THRESHOLD = 7000


def _options(**kw: Any) -> LoopOptions:
    return LoopOptions(compaction=CompactionConfig(threshold=THRESHOLD, keep_turns=3, min_share=0.3, **kw))


def _turn(seen: list[TurnContext], summaries: list[TurnContext]) -> Any:
    def turn(ctx: TurnContext) -> Turn:
        if not ctx.tools:  # a summarisation turn: no tools, the request last
            summaries.append(ctx)
            return Turn("## Strategies and outcomes\n- read the starter\n## What the profiler said\n- nothing\n"
                        "## Open hypotheses\n- none\n## Next steps\n- keep reading", usage=Usage(900, 120, 0.02))
        seen.append(ctx)
        n = len(seen)
        calls = (ToolCall(f"r{n}", "read_resource", {"uri": "problem://softmax/starter"}),
                 ToolCall(f"n{n}", "note", {"text": f"unique-marker-{n}: " + "observation " * 40,
                                            "problem": "softmax", "tags": ["hypothesis"] if n % 4 == 0 else []}))
        return Turn(f"turn-text-{n}: reading the starter again", calls)
    return turn


def _run(home: Path, run_id: str, steps: int, name: str = "scripted") -> tuple[Loop, list[TurnContext],
                                                                            list[TurnContext]]:
    seen: list[TurnContext] = []
    summaries: list[TurnContext] = []
    service, app = in_process(home)
    try:
        with EventLog(home / "marathon.db") as log:
            new_run(log, run_id, steps, target_speedup=3.0)
        end, loop = anyio.run(functools.partial(drive, service.log, ServerSpec(app=app),
                                                Scripted(_turn(seen, summaries), name=name), run_id,
                                                options=_options()))
    finally:
        service.close()
    assert end.state == "budget"
    return loop, seen, summaries


def test_compaction_triggers_at_the_threshold_and_the_goal_survives_it(tmp_path: Path) -> None:
    _, seen, summaries = _run(tmp_path, "compact", 40)
    assert not summaries  # a model-free policy gets the log's summary, no extra turn
    with EventLog(tmp_path / "marathon.db") as log:
        comps = log.events(run_id="compact", kinds=["compaction"])
        turns = log.events(run_id="compact", kinds=["model.turn"])
        first = log.events(run_id="compact", kinds=["run.start"])[0].payload["goal"]
    assert len(comps) >= 2
    sizes = [t.payload["context_tokens"] for t in turns]
    assert max(sizes) < THRESHOLD  # every turn was asked below the threshold
    for c in comps:
        p = c.payload
        assert p["tokens_before"] >= THRESHOLD and p["tokens_after"] < THRESHOLD
        assert p["share_removed"] >= 0.3 and p["method"] == "log"
        before = [t for t in turns if t.id < c.id][-1]
        assert before.payload["context_tokens"] < THRESHOLD <= p["tokens_before"]  # the first turn past it
    assert len(turns) == len(seen) == 20  # hidden turns stay in the log
    check_invariants(tmp_path / "marathon.db", "compact", 40)
    first_comp_turn = next(i for i, t in enumerate(turns) if t.id > comps[0].id)
    for ctx in seen[first_comp_turn:]:
        assert ctx.messages[0].content == first  # the first user message, verbatim
        summary = ctx.messages[1].content
        for heading in ("## Strategies and outcomes", "## What the profiler said", "## Open hypotheses",
                        "## Next steps"):
            assert heading in summary
        hypotheses = summary.split("## Open hypotheses")[1].split("## Next steps")[0]
        assert "unique-marker-" in hypotheses  # notes tagged as hypotheses are carried into the summary
        pinned = ctx.messages[-1].content
        assert pinned.startswith("[pinned state") and "`softmax` at shape `bench`" in pinned and "3x" in pinned
        assert "turn-text-1:" not in "".join(m.content for m in ctx.messages[1:])  # hidden from the model
        chars = sum(len(m.content) for m in ctx.messages)
        assert estimate_tokens(chars) < THRESHOLD


def test_resume_rebuilds_the_same_conversation_after_compaction(tmp_path: Path) -> None:
    live, _, _ = _run(tmp_path, "rebuild", 30)
    service, app = in_process(tmp_path)

    async def fresh() -> Loop:
        async with Link(ServerSpec(app=app), run_id="rebuild") as link:
            return Loop(service.log, link, Scripted(lambda c: Turn("")), "rebuild", options=_options())

    try:
        again = anyio.run(fresh)
    finally:
        service.close()
    assert again.transcript.summary == live.transcript.summary and again.transcript.cut_id == live.transcript.cut_id
    assert again.transcript.messages() == live.transcript.messages()


def test_a_model_writes_its_own_summary_and_its_tokens_count(tmp_path: Path) -> None:
    loop, _, summaries = _run(tmp_path, "model", 30, name="model-like")
    assert summaries, "no summarisation turn"
    ctx = summaries[0]
    assert ctx.messages[-1].content == SUMMARY_REQUEST and not ctx.tools
    with EventLog(tmp_path / "marathon.db") as log:
        comps = [e.payload for e in log.events(run_id="model", kinds=["compaction"])]
    assert all(c["method"] == "model" for c in comps) and len(comps) == len(summaries)
    assert "- keep reading" in comps[0]["summary"] and "## Steps, as the log records them" in comps[0]["summary"]
    assert loop.state.spend.compaction_tokens == 1020 * len(comps)
    assert abs(loop.state.spend.cost_usd - 0.02 * len(comps)) < 1e-9  # compaction is paid from the budget
