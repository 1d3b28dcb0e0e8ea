"""A run as the event log tells it: a projection folded from events, never from the conversation.

`RunState.fold(event)` applies one event; folding a run's events from the start gives the same state
the loop had when it wrote them, which is how a resumed run gets its step count, spend, best kernel
and open calls back. While a run is live the loop folds each event as it commits it, and polls the
log for what others wrote (the server's `attempt` events, notes from other agents), so building the
pinned block costs a few dictionary reads, not a query over the whole log, at step 10 or 10,000.

Two sources of attempts, merged: the run's own tool results (agent.result, which carry the numbers
the server returned, so a run against a remote server has them too) and `attempt` events in the
local log (the server's, when it shares the log; other runs' and agents').

Best-so-far counts only verified correct attempts (the judge's `verified: true`; attempts logged
before the field existed are unverified). Two are kept: `best`, from this run's own attempts, which
is what the goal is checked against, and `log_best`, from every run in the log, shown beside it.

A run's attempts are numbered 1, 2, 3, ... in the order the run made them (`AttemptRec.number`): the
server's attempt event ids are shared by every run in the log, so "#13-#31" would tell a reader
nothing about how many attempts this run made. The event id stays on the record for `attempt(id)`.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from client.fingerprint import attempt_key, fingerprint
from client.goal import Goal
from state import Event
from state.events import outcome_for

NOT_FAILURES = ("correct", "compiled")


def fmt_us(us: float) -> str:
    """A time in microseconds as people read it: 41.23, 13,770."""
    return f"{us:,.0f}" if us >= 1000 else f"{us:.4g}"


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass
class AttemptRec:
    """One judged candidate, with the numbers best-so-far and the ledger need."""

    tool: str
    outcome: str
    ts: float
    step: int | None = None  # the step of this run that made it; None for attempts from elsewhere
    attempt_id: int | None = None  # the server's attempt event id
    run_id: str | None = None
    median_us: float | None = None
    speedup: float | None = None
    max_rel_err: float | None = None
    error_class: str | None = None
    error: str | None = None
    baseline: str | None = None
    baseline_us: float | None = None
    device: str | None = None
    fingerprint: str | None = None
    source_sha: str | None = None
    key: str | None = None
    verified: bool = False  # the judge vouched for the verdict (state.events ATTEMPT); absent before: False
    verification: str | None = None  # how, e.g. "judge:v1+bounds"
    number: int | None = None  # its place among its run's attempts (1 = the first); set as the run folds it

    def as_dict(self) -> dict[str, Any]:
        """The record as it is logged: without `number`, which the run derives from the order of its
        attempts when it folds them, so a logged copy never disagrees with a later fold."""
        out = asdict(self)
        out.pop("number")
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptRec:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def numbers(self) -> str:
        parts = [self.outcome]
        if self.median_us is not None:
            parts.append(f"{fmt_us(self.median_us)} us")
        if self.speedup is not None:
            parts.append(f"{self.speedup:.3g}x")
        if self.max_rel_err is not None:
            parts.append(f"max rel err {self.max_rel_err:.1e}")
        if self.error:
            parts.append(self.error.splitlines()[0][:160])
        return ", ".join(parts)

    def ident(self, run_id: str, number: int | None = None) -> str:
        """Which attempt this is, for a reader of run `run_id`: "attempt 3 (step 5, event #105)" for one
        of its own, "attempt 2 of run R (event #11)" for another run's. `number` stands in for a record
        that does not carry its own (another run's, numbered from the log)."""
        number = self.number if number is None else number
        event = f"event #{self.attempt_id}" if self.attempt_id is not None else None
        if self.run_id == run_id:
            head = f"attempt {number}" if number is not None else "an attempt of this run"
            extra = [x for x in (f"step {self.step}" if self.step is not None else None, event) if x]
        else:
            head = (f"attempt {number} of run {self.run_id}" if number is not None and self.run_id else
                    f"an attempt of run {self.run_id}" if self.run_id else "an attempt outside any run")
            extra = [event] if event else []
        return head + (f" ({', '.join(extra)})" if extra else "")

    def better_than(self, other: AttemptRec | None) -> bool:
        """The log's rule: only a verified correct attempt counts; a timed one beats an untimed one;
        faster wins; else newer wins."""
        if self.outcome != "correct" or self.verified is not True:
            return False
        if other is None:
            return True
        if self.median_us is not None:
            return other.median_us is None or self.median_us < other.median_us
        return other.median_us is None and self.ts >= other.ts


def attempt_from_result(tool: str, args: dict[str, Any], structured: dict[str, Any] | None, *, ts: float,
                        step: int, fp: str | None) -> AttemptRec | None:
    """The attempt a compile/profile result reports, from its structured content (None for other tools)."""
    if tool not in ("compile", "profile") or not isinstance(structured, dict) or "problem" not in structured:
        return None
    cls = structured.get("error_class")
    if tool == "compile":
        outcome = outcome_for("compile", bool(structured.get("ok")), cls)
        error = None
        errors = structured.get("errors") or []
        if errors and isinstance(errors[0], dict):
            line = errors[0].get("line")
            error = f"{errors[0].get('message')}" + (f" (line {line})" if line else "")
    else:
        outcome = outcome_for("profile", bool(structured.get("ok")), cls) if structured.get("ok") or cls else "error"
        if structured.get("ok") and structured.get("correct"):
            outcome = "correct"
        error = structured.get("error")
    timing = structured.get("timing") or {}
    base = structured.get("baseline") or {}
    device = structured.get("device")
    return AttemptRec(
        tool=tool, outcome=outcome, ts=ts, step=step, attempt_id=structured.get("attempt_id"),
        median_us=_num(timing.get("median_us")) if isinstance(timing, dict) else None,
        speedup=_num(structured.get("speedup")), max_rel_err=_num(structured.get("max_rel_err")),
        error_class=cls, error=str(error)[:2000] if error else None,
        baseline=base.get("name") if isinstance(base, dict) else None,
        baseline_us=_num(base.get("median_us")) if isinstance(base, dict) else None,
        device=(device.get("name") if isinstance(device, dict) else device) or None,
        fingerprint=fp, source_sha=structured.get("source_sha"), key=attempt_key(tool, args, fp),
        **_verdict(structured))


def _verdict(data: dict[str, Any]) -> dict[str, Any]:
    """verified and verification as an attempt or a result reports them: anything but a JSON true is
    unverified (a result or attempt from before the field existed has none). An attempt names how in a
    string ("judge:v1+bounds"); a tool result may give an object whose "by" names it."""
    how = data.get("verification")
    if isinstance(how, dict):
        how = how.get("by")
    return {"verified": data.get("verified") is True, "verification": how if isinstance(how, str) else None}


@dataclass
class Spend:
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    model_turns: int = 0
    compactions: int = 0
    compaction_tokens: int = 0
    model_errors: int = 0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def add_usage(self, usage: dict[str, Any] | None) -> int:
        usage = usage or {}
        t_in, t_out = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
        self.tokens_in += t_in
        self.tokens_out += t_out
        self.cost_usd += float(usage.get("cost_usd") or 0.0)
        return t_in + t_out


@dataclass
class Note:
    id: int
    text: str
    tags: list[str] = field(default_factory=list)
    run_id: str | None = None


class RunState:
    """Everything the loop, the pinned block, `status` and `report` need, folded from events."""

    RECENT_NOTES = 12

    def __init__(self, run_id: str, source_of: Callable[[str], str | None] | None = None) -> None:
        self.run_id = run_id
        self._source_of = source_of or (lambda sha: None)
        self.goal: Goal | None = None
        self.start: dict[str, Any] = {}
        self.ended: dict[str, Any] | None = None
        self.last_event_id = 0
        self.last_ts = 0.0
        self.foreign_cursor = 0
        self.sessions: list[list[float]] = []  # [start ts, last event ts] per process that ran the run
        self.hosts: list[dict[str, Any]] = []  # pid/host of each session, for liveness
        # steps and turns
        self.turns = 0
        self.last_turn: Event | None = None
        self.steps_started = 0
        self.steps_done = 0
        self.open_calls: dict[int, Event] = {}
        self.done_steps: set[int] = set()
        self.status_counts: Counter[str] = Counter()
        self.tool_counts: Counter[str] = Counter()
        self.repeat_digest: str | None = None
        self.repeat_count = 0
        # attempts
        self.attempts: list[AttemptRec] = []  # this run's, in step order
        self.tried: dict[str, AttemptRec] = {}  # attempt_key -> the first attempt with it
        self.best: AttemptRec | None = None  # this run's own best verified attempt: what the goal is checked on
        self.best_source: str | None = None
        self.log_best: AttemptRec | None = None  # the best verified attempt of any run in the log (this one too)
        self.log_best_source: str | None = None
        self.first_best: AttemptRec | None = None  # the log's best elsewhere, known before this run's first attempt
        self._first_best_until = math.inf  # attempt ids from here on came after the run (set while loading)
        self.baseline: tuple[str, float, int | None] | None = None  # name, median us, step measured
        self.outcomes: Counter[str] = Counter()
        self.attempt_tools: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.streak_class: str | None = None
        self.streak = 0
        self.streak_error: str | None = None
        self._seen_attempts: dict[tuple[Any, Any], AttemptRec] = {}
        self._fp_by_sha: dict[str, str] = {}
        # notes, spend, compaction
        self.notes: deque[Note] = deque(maxlen=self.RECENT_NOTES)
        self.notes_total = 0
        self._note_ids: set[int] = set()
        self.spend = Spend()
        self.compaction: Event | None = None

    # -- derived ------------------------------------------------------------------------------------

    @property
    def problem(self) -> str | None:
        return self.goal.problem if self.goal else None

    @property
    def shape(self) -> str:
        return self.goal.shape if self.goal else "bench"

    def active_seconds(self, now: float | None = None, live: bool = False) -> float:
        """Wall time the run has been active: each session from its start to its last event (the
        current one to `now` when live). Time between a crash and the resume does not count."""
        total = 0.0
        for i, (start, last) in enumerate(self.sessions):
            end = (now or time.time()) if live and i == len(self.sessions) - 1 else last
            total += max(0.0, end - start)
        return total

    def goal_met(self) -> str | None:
        """Why the goal is met (a sentence), from this run's own best verified attempt; else None."""
        best = self.best
        if self.goal is None or best is None or best.verified is not True or best.run_id != self.run_id:
            return None
        return self.goal.met(best.speedup, best.median_us)

    def budget_left(self, now: float | None = None, live: bool = False) -> dict[str, float | None]:
        """What is left of each limit (None: no limit)."""
        if self.goal is None:
            return {}
        b = self.goal.budget
        left: dict[str, float | None] = {
            "steps": None if b.steps is None else b.steps - self.steps_started,
            "hours": None if b.hours is None else b.hours - self.active_seconds(now, live) / 3600,
            "tokens": None if b.tokens is None else b.tokens - self.spend.tokens,
            "cost_usd": None if b.cost_usd is None else b.cost_usd - self.spend.cost_usd,
        }
        if self.goal.deadline is not None:
            left["deadline_s"] = self.goal.deadline - (now or time.time())
        return left

    def budget_spent(self, now: float | None = None, live: bool = False) -> str | None:
        """Which budget is spent (a sentence), or None."""
        for name, value in self.budget_left(now, live).items():
            if value is not None and value <= 0:
                return {"steps": "the step budget is spent", "hours": "the wall-time budget is spent",
                        "tokens": "the token budget is spent", "cost_usd": "the cost budget is spent",
                        "deadline_s": "the deadline has passed"}[name]
        return None

    def last_turn_pending(self) -> list[dict[str, Any]]:
        """Calls of the newest model turn that were committed but never started (no agent.call)."""
        if self.last_turn is None:
            return []
        return [c for c in self.last_turn.payload.get("calls", [])
                if c["step"] > self.steps_started]

    # -- folding ------------------------------------------------------------------------------------

    def fold(self, ev: Event) -> None:
        """Apply one event. Safe to call twice with the same event (the second is ignored)."""
        own = ev.run_id == self.run_id
        if ev.kind in ("attempt", "note"):
            self.foreign_cursor = max(self.foreign_cursor, ev.id)
            if ev.kind == "attempt":
                self._fold_attempt_event(ev)
            elif own or ev.payload.get("problem") == self.problem:
                self._add_note(ev.id, ev.payload.get("text", ""), ev.payload.get("tags") or [], ev.run_id)
            return
        if not own or ev.id <= self.last_event_id:
            return
        self.last_event_id = ev.id
        self.last_ts = ev.ts
        # A resume opens a session of its own: its time must not stretch the previous session over the gap.
        if self.sessions and ev.kind != "run.resume":
            self.sessions[-1][1] = max(self.sessions[-1][1], ev.ts)
        handler = _OWN.get(ev.kind)
        if handler is not None:
            handler(self, ev)

    def _run_start(self, ev: Event) -> None:
        self.start = ev.payload
        self.goal = Goal.from_payload(ev.payload.get("spec") or {"problem": ev.payload.get("problem", "?")})
        self.sessions.append([ev.ts, ev.ts])
        self.hosts.append({"pid": ev.payload.get("pid"), "host": ev.payload.get("host"),
                           "proc_start": ev.payload.get("proc_start")})

    def _run_resume(self, ev: Event) -> None:
        self.ended = None
        extend = ev.payload.get("extend")
        if isinstance(extend, dict) and self.goal is not None:
            self.goal = self.goal.extended(extend)
        self.sessions.append([ev.ts, ev.ts])
        self.hosts.append({"pid": ev.payload.get("pid"), "host": ev.payload.get("host"),
                           "proc_start": ev.payload.get("proc_start")})

    def _run_end(self, ev: Event) -> None:
        self.ended = ev.payload

    def _model_turn(self, ev: Event) -> None:
        self.turns += 1
        self.last_turn = ev
        self.spend.model_turns += 1
        self.spend.add_usage(ev.payload.get("usage"))

    def _compaction(self, ev: Event) -> None:
        self.compaction = ev
        self.spend.compactions += 1
        self.spend.compaction_tokens += self.spend.add_usage(ev.payload.get("usage"))

    def _model_error(self, ev: Event) -> None:
        self.spend.model_errors += 1

    def _agent_call(self, ev: Event) -> None:
        step = int(ev.payload["step"])
        self.steps_started = max(self.steps_started, step)
        self.open_calls[step] = ev
        self.tool_counts[ev.payload["tool"]] += 1
        digest = ev.payload.get("digest")
        if digest is not None and digest == self.repeat_digest:
            self.repeat_count += 1
        else:
            self.repeat_digest, self.repeat_count = digest, 1

    def _agent_result(self, ev: Event) -> None:
        p = ev.payload
        step = int(p["step"])
        if step in self.done_steps:
            return
        self.done_steps.add(step)
        self.steps_done += 1
        call = self.open_calls.pop(step, None)
        self.status_counts[p.get("status", "ok")] += 1
        args = call.payload.get("args", {}) if call is not None else {}
        if isinstance(p.get("attempt"), dict):
            rec = AttemptRec.from_dict(p["attempt"])
            rec.run_id = self.run_id
            self._add_run_attempt(rec, args.get("source") if isinstance(args.get("source"), str) else None)
        structured = p.get("structured") or {}
        if p.get("tool") == "best" and p.get("ok") and isinstance(structured.get("best"), dict):
            found = structured["best"]
            if found.get("problem") == self.problem and found.get("shape") == self.shape:
                rec = AttemptRec(tool=found.get("tool", "profile"), outcome=found.get("outcome", "correct"),
                                 ts=float(found.get("ts") or ev.ts), attempt_id=found.get("id"),
                                 run_id=found.get("run_id"), median_us=_num(found.get("median_us")),
                                 speedup=_num(found.get("speedup")), max_rel_err=_num(found.get("max_rel_err")),
                                 device=found.get("device"), source_sha=found.get("source_sha"), **_verdict(found))
                self._consider(rec, found.get("source"))
        if p.get("tool") == "note" and p.get("ok") and isinstance(structured.get("id"), int):
            self._add_note(structured["id"], str(args.get("text", "")), list(args.get("tags") or []), self.run_id)

    # -- attempts and notes -------------------------------------------------------------------------

    def _add_run_attempt(self, rec: AttemptRec, source: str | None) -> None:
        self.attempts.append(rec)
        rec.number = len(self.attempts)
        if rec.key is not None:
            seen = self.tried.get(rec.key)
            # the run's own record of an attempt seen first as the server's event: it has the step and number
            own_copy = seen is not None and seen.step is None and seen.attempt_id is not None and (
                seen.attempt_id == rec.attempt_id)
            if seen is None or own_copy:
                self.tried[rec.key] = rec
        self.outcomes[rec.outcome] += 1
        self.attempt_tools[rec.tool] += 1
        if rec.outcome in NOT_FAILURES:
            self.streak_class, self.streak, self.streak_error = None, 0, None
        else:
            cls = rec.error_class or rec.outcome
            self.failures[cls] += 1
            if cls == self.streak_class:
                self.streak += 1
            else:
                self.streak_class, self.streak = cls, 1
            self.streak_error = rec.error
        if rec.baseline_us is not None and rec.baseline:
            self.baseline = (rec.baseline, rec.baseline_us, rec.step)
        self._consider(rec, source)

    def _consider(self, rec: AttemptRec, source: str | None) -> None:
        """Offer an attempt for best-so-far; the same server attempt seen twice counts once.

        Only verified correct attempts can be best (`better_than`); only this run's own can be its
        `best`, any run's its `log_best`. One server attempt reaches the state twice (the run's tool
        result, the server's attempt event), in either order: the step comes from the run's record
        and the verdict from whichever of the two says verified."""
        if rec.attempt_id is not None:
            ident = (rec.attempt_id, rec.source_sha)
            seen = self._seen_attempts.get(ident)
            if seen is None:
                self._seen_attempts[ident] = rec
            else:
                keep = rec if rec.step is not None and seen.step is None else seen  # the run's own record
                other = seen if keep is rec else rec
                newly_verified = rec.verified and not seen.verified
                if other.verified and not keep.verified:
                    keep.verified, keep.verification = True, other.verification
                keep.run_id = keep.run_id or other.run_id
                self._seen_attempts[ident] = keep
                if not newly_verified:
                    for name in ("best", "log_best"):
                        if getattr(self, name) is seen:
                            setattr(self, name, keep)
                    return
                rec = keep  # first seen unverified, now verified: offered for best below
        if (rec.run_id != self.run_id and not self.attempts and rec.better_than(self.first_best)
                and (rec.attempt_id is None or rec.attempt_id < self._first_best_until)):
            self.first_best = rec  # known before this run judged anything: where the run started from
        if rec.better_than(self.log_best):
            self.log_best = rec
            self.log_best_source = source if source is not None else (
                self._source_of(rec.source_sha) if rec.source_sha else None)
        if rec.run_id == self.run_id and rec.better_than(self.best):
            self.best = rec
            self.best_source = source if source is not None else (
                self._source_of(rec.source_sha) if rec.source_sha else None)

    def _fold_attempt_event(self, ev: Event) -> None:
        p = ev.payload
        if p.get("problem") != self.problem or p.get("shape") != self.shape:
            return
        rec = AttemptRec(tool=p.get("tool", "?"), outcome=p.get("outcome", "error"), ts=ev.ts, attempt_id=ev.id,
                         run_id=ev.run_id, median_us=_num(p.get("median_us")), speedup=_num(p.get("speedup")),
                         max_rel_err=_num(p.get("max_rel_err")), error_class=p.get("error_class"),
                         error=p.get("error"), baseline=p.get("baseline"), baseline_us=_num(p.get("baseline_us")),
                         device=p.get("device"), source_sha=p.get("source_sha"), **_verdict(p))
        if rec.tool == "profile" and rec.source_sha:
            fp = self._fp_by_sha.get(rec.source_sha)
            if fp is None:
                text = self._source_of(rec.source_sha)
                fp = fingerprint(text) if text is not None else None
                if fp is not None:
                    self._fp_by_sha[rec.source_sha] = fp
            if fp is not None:
                rec.fingerprint = fp
                key = attempt_key("profile", {"problem": p.get("problem"), "shape": p.get("shape"),
                                              "source": ""}, fp)
                if key is not None and key not in self.tried:
                    self.tried[key] = rec
        if self.baseline is None and rec.baseline_us is not None and rec.baseline:
            self.baseline = (rec.baseline, rec.baseline_us, None)
        if rec.outcome == "correct":
            self._consider(rec, None)

    def number_of(self, rec: AttemptRec) -> int | None:
        """The number of one of this run's attempts (1 = its first), also for a second record of it
        (the server's attempt event, a `best` result) that came without one; None for another run's."""
        if rec.number is not None or rec.run_id != self.run_id:
            return rec.number
        if rec.attempt_id is None:
            return None
        return next((a.number for a in self.attempts if a.attempt_id == rec.attempt_id), None)

    def _add_note(self, note_id: int, text: str, tags: list[str], run_id: str | None) -> None:
        if note_id in self._note_ids:
            return
        self._note_ids.add(note_id)
        self.notes_total += 1
        self.notes.append(Note(note_id, text, [str(t) for t in tags], run_id))

    # -- reading a run back -------------------------------------------------------------------------

    @classmethod
    def load(cls, log: Any, run_id: str) -> RunState:
        """Fold a run's events, and the log's attempts and notes for its problem, in id order.

        Other runs' attempts logged after this run's last event are still folded (the whole log's best
        includes them) but cannot be where the run started from (`first_best`): a run that judged
        nothing would otherwise take a later run's kernel as its starting point. Once loaded, the state
        goes on as a live one (a resumed run), where every new attempt is of its own time."""
        state = cls(run_id, source_of=log.source)
        own = log.events(run_id=run_id)
        if not own or own[0].kind != "run.start":
            raise KeyError(f"no run {run_id!r} started by the bundled client in {log.path}")
        state.fold(own[0])
        state._first_best_until = own[-1].id
        foreign = [e for e in log.events(kinds=["attempt", "note"]) if e.run_id != run_id]
        for ev in sorted([*own[1:], *foreign], key=lambda e: e.id):
            state.fold(ev)
        state._first_best_until = math.inf
        return state

    def poll(self, log: Any) -> int:
        """Fold the attempts and notes written since the last poll (by the server, other agents)."""
        new = log.events(kinds=["attempt", "note"], after_id=self.foreign_cursor)
        for ev in new:
            self.fold(ev)
        return len(new)


_OWN: dict[str, Callable[[RunState, Event], None]] = {
    "run.start": RunState._run_start,
    "run.resume": RunState._run_resume,
    "run.end": RunState._run_end,
    "model.turn": RunState._model_turn,
    "compaction": RunState._compaction,
    "model.error": RunState._model_error,
    "agent.call": RunState._agent_call,
    "agent.result": RunState._agent_result,
}
