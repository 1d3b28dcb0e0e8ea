"""The bundled client's loop: ask the policy, commit, call the tools over MCP, commit, repeat.

Every effect is preceded by its record. A model turn is committed (model.turn) before any of its
tool calls runs; each call is committed (agent.call) before it is sent and its result (agent.result)
before the loop looks at it; a compaction is committed before the conversation changes. So after
kill -9, power loss or a server crash, `resume` folds the log back into the same state and finds
at most the calls that were in flight; client.recovery settles each from what the log shows and what
the tool is (read back, sent again, or closed as interrupted). Calls of the newest turn that never
started are then run, and the loop goes on. Spend is folded from the log, never reset.

Stops: the goal met (from measured numbers in the log), a budget spent (steps, active hours, tokens,
cost, deadline), or the policy done. Ctrl-C and kills leave the run resumable (no run.end).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from client.compaction import (
    CompactionConfig,
    log_summary,
    model_summary_text,
    plan,
    summary_context,
    wants_model_summary,
)
from client.fingerprint import attempt_key, fingerprint
from client.goal import SYSTEM, Goal, goal_text
from client.mcp_link import READ_RESOURCE, CallTimeout, Link, LinkDown, ToolAnswer
from client.pinned import best_line, budget_line, pinned_dict, pinned_text
from client.policy import Message, Policy, ProviderError, Turn, TurnContext
from client.recovery import Recovery
from client.result_text import call_result, repeat_text, short_outcome
from client.run_projection import RunState, fmt_us
from client.run_status import process_identity
from client.transcript import Transcript, estimate_tokens
from state import Event, EventLog, canonical_json, intent_key, keys

log = logging.getLogger("marathon.client")

# Safe to send again when the server's annotations are not known (the server marks these itself).
SAFE_BY_NAME = frozenset({"list_problems", "attempts", "best", "attempt", "compile", "profile", "hotspots",
                          "baseline", READ_RESOURCE.name})
NUDGE = ("The goal is not met yet ({best}) and budget remains ({budget}). Keep going: call a tool. Answering "
         "without a tool call again ends the run.")

Hook = Callable[[str], None]


@dataclass
class LoopOptions:
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    call_timeouts: dict[str, float] = field(default_factory=lambda: {"profile": 1200.0, "baseline": 1800.0,
                                                                     "compile": 600.0, "hotspots": 900.0})
    default_timeout: float = 120.0
    link_retries: int = 2  # re-sends of a call that is safe to repeat after the connection broke
    max_nudges: int = 1  # times a model that stops early is asked to go on
    model_retries: int = 5  # consecutive retryable model errors before the run fails
    model_backoff_s: float = 10.0
    budget_every: int = 10  # a budget event every N steps (and at the end)

    def timeout(self, tool: str) -> float:
        return self.call_timeouts.get(tool, self.default_timeout)

    def as_payload(self) -> dict[str, Any]:
        c = self.compaction
        return {"compaction": {"context_window": c.context_window, "threshold": c.limit, "keep_turns": c.keep_turns,
                               "min_share": c.min_share},
                "call_timeouts": self.call_timeouts, "default_timeout": self.default_timeout}


@dataclass
class RunEnd:
    state: str  # done, budget, failed
    reason: str


class RunFailed(Exception):
    """The run cannot go on (a model error that is not retryable, too many errors in a row)."""


def start_run(log: EventLog, run_id: str, goal: Goal, *, policy: str, model: str | None = None,
              policy_options: dict[str, Any] | None = None, server: dict[str, Any] | None = None,
              options: LoopOptions | None = None) -> Event:
    """Commit a new run's run.start: its goal (the first user message, verbatim) and how to run it."""
    payload = {"goal": goal_text(goal), "spec": goal.as_payload(), "problem": goal.problem, "shape": goal.shape,
               "system": SYSTEM, "policy": policy, "model": model, "policy_options": policy_options or {},
               "server": server or {}, "options": (options or LoopOptions()).as_payload(), **process_identity()}
    return log.append("run.start", payload, run_id=run_id, key=keys.run_start(run_id))


class Loop:
    """Drives one run. Build with `Loop(log, link, policy, run_id)`, then `await loop.run()`."""

    def __init__(self, log: EventLog, link: Link, policy: Policy, run_id: str, *,
                 options: LoopOptions | None = None, progress: Callable[[str], None] | None = None,
                 hook: Hook | None = None) -> None:
        self.log = log
        self.link = link
        self.policy = policy
        self.run_id = run_id
        self.options = options or LoopOptions()
        self.progress = progress
        self.hook = hook or (lambda point: None)
        self.state = RunState.load(log, run_id)
        self.recovery = Recovery(log, run_id)
        if self.state.goal is None:
            raise KeyError(f"run {run_id!r} has no goal")
        self.goal: Goal = self.state.goal
        self.system = str(self.state.start.get("system") or SYSTEM)
        self.transcript = self._rebuild_transcript()
        self.model_policy = wants_model_summary(policy)
        self.finished: str | None = None
        self.nudges = 0
        self.model_errors_in_row = 0
        self.timings = {"policy_s": 0.0, "tools_s": 0.0, "steps": 0}
        self._ratio = 1.0  # provider-reported tokens / estimated tokens, from the newest turn with usage
        self._tools: list[Any] = []
        self._tools_chars = 0
        self._set_tools()
        self._turn_texts: dict[int, str] = {}
        self._latency = 0.0
        self._asked_tokens = 0

    # -- setup --------------------------------------------------------------------------------------

    def _rebuild_transcript(self) -> Transcript:
        compaction = self.state.compaction
        after = int(compaction.payload.get("cut_id", 0)) if compaction is not None else 0
        events = self.log.events(run_id=self.run_id, kinds=["model.turn", "agent.result"], after_id=after)
        return Transcript.from_events(str(self.state.start["goal"]), events, compaction)

    def mark_resumed(self, reason: str = "resumed", extend: dict[str, Any] | None = None) -> Event:
        """Commit run.resume: a new session of this run (liveness, active time), under new limits when `extend`
        names them (client.goal.Goal.extended)."""
        payload = {**process_identity(), "reason": reason, "dangling": len(self.state.open_calls),
                   "steps": self.state.steps_done}
        if extend:
            payload["extend"] = extend
        ev = self.log.append("run.resume", payload, run_id=self.run_id)
        self.state.fold(ev)
        if self.state.goal is not None:
            self.goal = self.state.goal
        return ev

    # -- the loop -----------------------------------------------------------------------------------

    async def run(self) -> RunEnd:
        await self.link.ensure()
        self._set_tools()
        try:
            await self._recover()
            while True:
                self.state.poll(self.log)
                stop = self._stop()
                if stop is not None:
                    return self._end(stop)
                await self._maybe_compact()
                turn = await self._ask()
                if turn is not None:
                    await self._take(turn)
        except RunFailed as exc:
            return self._end(RunEnd("failed", str(exc)))

    def _stop(self) -> RunEnd | None:
        met = self.state.goal_met()
        if met:
            return RunEnd("done", f"the goal is met: {met} ({best_line(self.state)})")
        spent = self.state.budget_spent(live=True)
        if spent:
            return RunEnd("budget", spent)
        if self.finished is not None:
            return RunEnd("done", f"the policy finished: {self.finished[:300]}")
        return None

    def _end(self, end: RunEnd) -> RunEnd:
        self._budget_event()
        best = self.state.best
        ev = self.log.append("run.end", {"state": end.state, "reason": end.reason, "steps": self.state.steps_done,
                                         "best": None if best is None else best.as_dict()}, run_id=self.run_id)
        self.state.fold(ev)
        self._say(f"run {self.run_id} ended ({end.state}): {end.reason}")
        return end

    def _budget_event(self) -> None:
        s = self.state
        ev = self.log.append("budget", {"steps": s.steps_done, "tokens_in": s.spend.tokens_in,
                                        "tokens_out": s.spend.tokens_out, "cost_usd": s.spend.cost_usd,
                                        "active_s": s.active_seconds(live=True),
                                        "limits": self.goal.budget.__dict__}, run_id=self.run_id)
        self.state.fold(ev)

    # -- one turn -----------------------------------------------------------------------------------

    def context(self) -> TurnContext:
        """What the policy sees: the system prompt, the conversation, and the pinned block last."""
        messages = self.transcript.messages()
        messages.append(Message(role="user", content=pinned_text(self.state)))
        return TurnContext(system=self.system, messages=messages, tools=list(self._tools),
                           pinned=pinned_dict(self.state))

    async def _ask(self) -> Turn | None:
        ctx = self.context()
        self._asked_tokens = int(estimate_tokens(self._fixed_chars(ctx) + self.transcript.chars()) * self._ratio)
        started = time.perf_counter()
        try:
            if self.model_policy:
                turn = await anyio.to_thread.run_sync(self.policy.next_turn, ctx)
            else:
                turn = self.policy.next_turn(ctx)
        except ProviderError as exc:
            self.timings["policy_s"] += time.perf_counter() - started
            ev = self.log.append("model.error", {"message": str(exc)[:2000], "retryable": bool(exc.retryable),
                                                 "status": exc.status}, run_id=self.run_id)
            self.state.fold(ev)
            self.model_errors_in_row += 1
            if not exc.retryable or self.model_errors_in_row > self.options.model_retries:
                raise RunFailed(f"model error: {exc}") from exc
            self._say(f"model error (retrying in {self.options.model_backoff_s:.0f} s): {exc}")
            await anyio.sleep(self.options.model_backoff_s * self.model_errors_in_row)
            return None
        self._latency = time.perf_counter() - started
        self.timings["policy_s"] += self._latency
        self.model_errors_in_row = 0
        self._calibrate(ctx, turn)
        return turn

    def _calibrate(self, ctx: TurnContext, turn: Turn) -> None:
        if turn.usage.input_tokens > 0:
            est = estimate_tokens(self._fixed_chars(ctx) + self.transcript.chars())
            if est > 0:
                self._ratio = max(0.5, min(4.0, turn.usage.input_tokens / est))

    async def _take(self, turn: Turn) -> None:
        left = self.state.budget_left().get("steps")
        calls = list(turn.tool_calls)
        if left is not None:
            calls = calls[:max(0, int(left))]
        first_step = self.state.steps_started + 1
        seen: set[str] = {m.tool_call_id or "" for e in self.transcript.entries for m in e.messages}
        planned: list[dict[str, Any]] = []
        for i, call in enumerate(calls):
            call_id = call.id if call.id and call.id not in seen else f"call_{first_step + i}"
            seen.add(call_id)
            planned.append({"id": call_id, "name": call.name, "arguments": dict(call.arguments),
                            "step": first_step + i})
        nudge = None
        if not turn.tool_calls:
            if self.model_policy and self.nudges < self.options.max_nudges and self.state.goal_met() is None:
                self.nudges += 1
                nudge = NUDGE.format(best=best_line(self.state), budget=budget_line(self.state))
            else:
                self.finished = turn.text or "(no text)"
        else:
            self.nudges = 0
        usage = {"input_tokens": turn.usage.input_tokens, "output_tokens": turn.usage.output_tokens,
                 "cost_usd": turn.usage.cost_usd}
        turn_no = self.state.turns + 1
        payload: dict[str, Any] = {"turn": turn_no, "text": turn.text, "calls": planned,
                   "requested": len(turn.tool_calls), "usage": usage, "model": turn.model,
                   "policy": self.policy.name, "stop_reason": turn.stop_reason,
                   "latency_s": round(self._latency, 4), "nudge": nudge, "context_tokens": self._asked_tokens}
        batch: list[tuple[Any, ...]] = [("model.turn", payload, self.run_id, f"turn:{self.run_id}:{turn_no}")]
        if planned:
            batch.append(self._call_spec(planned[0], turn_no))
        events = self.log.append_many(batch)
        self.state.fold(events[0])
        self.transcript.add_turn(events[0].id, events[0].payload)
        for c in planned:
            self._turn_texts[c["step"]] = (turn.text or "").strip().splitlines()[0][:160] if turn.text else ""
        self.hook("turn")
        for i, planned_call in enumerate(planned):
            call_ev = events[1] if i == 0 else self.log.append(*self._call_spec(planned_call, turn_no))
            self.state.fold(call_ev)
            self.hook("call")
            await self._finish(call_ev, await self._execute(call_ev))

    def _call_spec(self, call: dict[str, Any], turn: int) -> tuple[str, dict[str, Any], str, str]:
        args = call["arguments"]
        payload: dict[str, Any] = {"step": call["step"], "call_id": self._call_id(call["step"]), "tool": call["name"],
                                   "args": args, "turn": turn, "id": call["id"],
                                   "digest": intent_key(call["name"], args)}
        if isinstance(args.get("source"), str):
            fp = fingerprint(args["source"])
            payload["fingerprint"] = fp
            key = attempt_key(call["name"], args, fp)
            if key is not None:
                payload["key"] = key
        return "agent.call", payload, self.run_id, f"call:{self.run_id}:{call['step']}"

    def _call_id(self, step: int) -> str:
        return f"{self.run_id}/{step}"

    async def _finish(self, call_ev: Event, result: dict[str, Any]) -> None:
        p = call_ev.payload
        result = {"step": p["step"], "call_id": p["call_id"], "tool": p["tool"], **result}
        ev = self.log.append("agent.result", result, run_id=self.run_id, key=keys.agent_result(self.run_id, p["step"]))
        self.state.fold(ev)
        self.transcript.add_result(ev.id, ev.payload)
        self.timings["steps"] += 1
        self.hook("result")
        if self.state.steps_done % self.options.budget_every == 0:
            self._budget_event()
        self._progress(ev.payload)

    # -- executing a call ---------------------------------------------------------------------------

    async def _execute(self, call_ev: Event, rerun: bool = False) -> dict[str, Any]:
        p = call_ev.payload
        tool, args, step = p["tool"], p.get("args") or {}, int(p["step"])
        key = p.get("key")
        if key is not None and key in self.state.tried:
            rec = self.state.tried[key]
            return {"ok": rec.outcome == "correct", "status": "from_log", "text": repeat_text(rec, self.run_id),
                    "structured": {"repeat_of": rec.as_dict()}}
        known = {t.name for t in self._tools}
        if tool not in known:
            return {"ok": False, "status": "client_error",
                    "text": f"unknown tool {tool!r}; the tools are: {', '.join(sorted(known))}"}
        started = time.perf_counter()
        answer: ToolAnswer | None = None
        status = "ok"
        tries = 0
        while answer is None:
            try:
                if tool == READ_RESOURCE.name:
                    answer = await self.link.read_resource(str(args.get("uri", "")), timeout=self.options.timeout(tool))
                else:
                    answer = await self.link.call(tool, args, call_id=p["call_id"], timeout=self.options.timeout(tool))
            except CallTimeout as exc:
                text = (f"timeout: {exc}. The connection was rebuilt; the call may still have run on the server "
                        "(`attempts` shows it if so).")
                answer, status = ToolAnswer(False, text), "timeout"
            except LinkDown as exc:
                tries += 1
                if tries > self.options.link_retries:
                    raise
                await self.link.ensure()  # a new connection: a spawned server is a new process by now
                self._set_tools()
                settled = self.recovery.after_link_down(call_ev, safe=self._safe(tool), why=str(exc))
                if settled is not None:
                    self.timings["tools_s"] += time.perf_counter() - started
                    return settled
                self._say(f"step {step}: the connection broke ({exc}); reconnected, sending {tool} again")
        self.timings["tools_s"] += time.perf_counter() - started
        if status == "ok" and not answer.ok:
            status = "tool_error"
        return call_result(p, answer, status, rerun=rerun)

    def _safe(self, tool: str) -> bool:
        if self.link.annotations:
            return self.link.is_safe_to_repeat(tool)
        return tool in SAFE_BY_NAME

    # -- resuming -----------------------------------------------------------------------------------

    async def _recover(self) -> None:
        """Settle the calls a stopped process left open (as client.recovery decides), then run the newest
        turn's unstarted calls."""
        for step in sorted(self.state.open_calls):
            call_ev = self.state.open_calls[step]
            resolution = self.recovery.resolve(call_ev, safe=self._safe(call_ev.payload["tool"]))
            settled = resolution.result
            if settled is None:
                self._say(f"step {step}: {resolution.send}")
                settled = await self._execute(call_ev, rerun=True)
            await self._finish(call_ev, settled)
        turn = self.state.last_turn
        if turn is not None:
            for call in self.state.last_turn_pending():
                call_ev = self.log.append(*self._call_spec(call, int(turn.payload.get("turn", 0))))
                self.state.fold(call_ev)
                self.hook("call")
                await self._finish(call_ev, await self._execute(call_ev))
            if not turn.payload.get("calls") and not turn.payload.get("nudge"):
                self.finished = str(turn.payload.get("text") or "(no text)")

    # -- compaction ---------------------------------------------------------------------------------

    def _set_tools(self) -> None:
        self._tools = [*self.link.tools, READ_RESOURCE]
        self._tools_chars = sum(len(t.name) + len(t.description) + len(canonical_json(t.input_schema))
                                for t in self._tools)

    def _fixed_chars(self, ctx: TurnContext | None = None) -> int:
        """What every context holds whatever is hidden: system prompt, tool schemas, the pinned block."""
        pinned = len(ctx.messages[-1].content) if ctx is not None else len(pinned_text(self.state))
        return len(self.system) + self._tools_chars + pinned + 64

    def context_tokens(self) -> int:
        """The context's size in tokens: chars/4, scaled by what the provider last reported."""
        return int(estimate_tokens(self._fixed_chars() + self.transcript.chars()) * self._ratio)

    async def _maybe_compact(self) -> None:
        cfg = self.options.compaction
        before = self.context_tokens()
        if before < cfg.limit:
            return
        fixed = self._fixed_chars()
        chosen = plan(self.transcript, fixed, cfg)
        if chosen is None:
            self.transcript.clip_results()
            return
        facts = log_summary(self.state, chosen.hidden, self._turn_texts)
        usage = {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
        method, summary = "log", facts
        if self.model_policy:
            ctx = summary_context(self.system, self.transcript.first, self.transcript.summary, chosen.hidden,
                                  pinned_dict(self.state))
            try:
                turn = await anyio.to_thread.run_sync(self.policy.next_turn, ctx)
                summary = model_summary_text(turn, facts, cfg)
                method = "model"
                usage = {"input_tokens": turn.usage.input_tokens, "output_tokens": turn.usage.output_tokens,
                         "cost_usd": turn.usage.cost_usd}
            except Exception as exc:
                method = f"log (the model's summary failed: {str(exc)[:200]})"
        hidden_chars = sum(e.chars for e in chosen.hidden) + len(self.transcript.summary or "")
        after_chars = fixed + self.transcript.chars() - hidden_chars + len(summary)
        after = int(estimate_tokens(after_chars) * self._ratio)
        payload: dict[str, Any] = {
                   "cut_id": chosen.cut_id, "first_id": chosen.hidden[0].first_event_id, "last_id": chosen.cut_id,
                   "summary": summary, "tokens_before": before, "tokens_after": after, "threshold": cfg.limit,
                   "share_removed": round(1 - after / before, 3) if before else 0.0,
                   "hidden_turns": [chosen.hidden[0].turn, chosen.hidden[-1].turn],
                   "kept_turns": len(chosen.kept), "method": method, "usage": usage,
                   "step": self.state.steps_done}
        ev = self.log.append("compaction", payload, run_id=self.run_id, key=keys.compaction(self.run_id, chosen.cut_id))
        self.state.fold(ev)
        self.transcript.compact(chosen.cut_id, summary)
        keep_from = self.state.steps_started - 200  # the summaries list at most the newest few dozen steps
        self._turn_texts = {k: v for k, v in self._turn_texts.items() if k > keep_from}
        if self.context_tokens() >= cfg.limit:
            self.transcript.clip_results()
        self.hook("compaction")
        self._say(f"compacted the conversation: {before:,} -> {after:,} tokens (turns {payload['hidden_turns'][0]}-"
                  f"{payload['hidden_turns'][1]} summarised, {len(chosen.kept)} kept)")

    # -- output -------------------------------------------------------------------------------------

    def _progress(self, result: dict[str, Any]) -> None:
        if self.progress is None:
            return
        b = self.goal.budget
        step = f"{result['step']}" + (f"/{b.steps}" if b.steps is not None else "")
        best = self.state.best
        if best is None:
            best_s = "-"
        else:
            best_s = (f"{best.speedup:.3g}x" if best.speedup is not None else
                      f"{fmt_us(best.median_us)}us" if best.median_us is not None else "untimed")
            number = self.state.number_of(best)
            if number is not None:
                best_s += f" (attempt {number})"
            elif best.attempt_id is not None:
                best_s += f" (event #{best.attempt_id})"
        self.progress(f"step {step:<7} {result['tool']:<13} {short_outcome(result):<34.34} | best {best_s} | "
                      f"{_left(self.state)}")

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)
        log.info("%s", text)


def _left(state: RunState) -> str:
    left = state.budget_left(live=True)
    parts = []
    if left.get("steps") is not None:
        parts.append(f"{int(left['steps'] or 0)} steps")
    if left.get("hours") is not None:
        parts.append(f"{max(0.0, left['hours'] or 0.0):.2f} h")
    if left.get("tokens") is not None:
        parts.append(f"{max(0, int(left['tokens'] or 0)):,} tok")
    if left.get("cost_usd") is not None:
        parts.append(f"${max(0.0, left['cost_usd'] or 0.0):.2f}")
    return "left " + (", ".join(parts) if parts else "no limit")

