"""Crash recovery for the bundled client: settling, from the event log, the calls a stopped run left open.

The loop (client.loop) commits every call (agent.call) before it is sent and its result (agent.result)
before it looks at it, so after kill -9, power loss or a server crash, `resume` folds the log back into
the same state and finds at most the calls that were in flight. Each is settled by what the log shows
and what the tool is:
- the server logged its result (the server's tool.intent key contains the call_id sent in _meta):
  the result is read back, nothing runs twice;
- otherwise a tool safe to repeat (read-only or idempotent by the server's annotations: compile,
  profile, baseline, the log queries) is sent again with the same call_id;
- otherwise (note): a note the server wrote is read back by its intent; one the server never received (no
  intent in the log it shares) is sent; else the call is closed with an explicit "interrupted" result.
The same reading settles a call whose connection broke while the loop waited for it.

`Recovery(log, run_id)` reads the log and decides; the loop does what it decides (sends, records).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from client.mcp_link import ToolAnswer
from client.result_text import call_result, interrupted_text, recovered_text
from state import Event, EventLog, keys

# Tools whose results the server logs in full, so a result that landed can be read back on resume.
RECOVERABLE = frozenset({"compile", "profile", "hotspots", "baseline", "note"})


@dataclass(frozen=True)
class Resolution:
    """How a call left open is settled: its result (read back from the log, or closed as interrupted),
    or, when `result` is None, sent (again) for the reason in `send`."""
    result: dict[str, Any] | None = None
    send: str = ""


def interrupted(tool: str, why: str = "") -> dict[str, Any]:
    """The result of a call that is closed unsettled: not safe to repeat and not shown complete in the log."""
    return {"ok": False, "status": "interrupted", "text": interrupted_text(tool) + why}


class Recovery:
    """What the log this client shares with its server says about one run's calls."""

    def __init__(self, log: EventLog, run_id: str) -> None:
        self.log = log
        self.run_id = run_id
        self._shared = False

    # -- the decisions the loop asks for ------------------------------------------------------------

    def resolve(self, call_ev: Event, *, safe: bool) -> Resolution:
        """How to settle a call a stopped process left open (`safe`: the tool is safe to repeat)."""
        call = call_ev.payload
        tool = call["tool"]
        settled = self.settle(call, call_ev.id)
        if settled is not None:
            return Resolution(result=settled)
        if safe:
            return Resolution(send=f"{tool} was in flight when the run stopped; sending it again")
        if self.never_reached(call, call_ev.id):
            # The log the server shares has no intent for it: the server never started it, so sending it
            # now is its first run, not a repeat (a server that had received it logged its intent first).
            return Resolution(send=f"{tool} never reached the server before the run stopped; sending it")
        self.close_intent(call, call_ev.id)  # the server's own record of the call, too
        return Resolution(result=interrupted(tool))

    def after_link_down(self, call_ev: Event, *, safe: bool, why: str) -> dict[str, Any] | None:
        """The result of a call whose connection broke (asked once the connection is rebuilt): read back
        from the log, or closed as interrupted when it is not safe to send again; None to send it again."""
        call = call_ev.payload
        settled = self.settle(call, call_ev.id)
        if settled is not None:
            return settled
        if not safe and not self.never_reached(call, call_ev.id):
            self.close_intent(call, call_ev.id)
            return interrupted(call["tool"], f" (the connection broke: {why})")
        return None

    # -- reading the log ----------------------------------------------------------------------------

    def server_call(self, call: dict[str, Any], after_id: int) -> tuple[Event | None, Event | None]:
        """The server's tool.intent for this call (by the call_id in its key) and its tool.result."""
        prefix = keys.intent_prefix(self.run_id, call["call_id"])
        for ev in self.log.events(run_id=self.run_id, kinds=["tool.intent"], after_id=after_id):
            if ev.key and ev.key.startswith(prefix):
                return ev, self.log.by_key(keys.tool_result(ev.id))
        return None, None

    def log_shared(self) -> bool:
        """Whether the server writes to this client's log (stdio and in-process servers on one home do)."""
        if not self._shared:
            self._shared = bool(self.log.events(run_id=self.run_id, kinds=["tool.intent"], limit=1))
        return self._shared

    def never_reached(self, call: dict[str, Any], call_event_id: int) -> bool:
        """True when the log proves the server never started this call: it shares the log, and it has no
        intent for the call_id. Asked after the connection was rebuilt, when the server that might
        have been running the call is gone, so the answer cannot change under us."""
        intent, _ = self.server_call(call, call_event_id)
        return intent is None and self.log_shared()

    def close_intent(self, call: dict[str, Any], call_event_id: int) -> None:
        """Close the server's intent for this call, if it has one without a result, as interrupted."""
        intent, result = self.server_call(call, call_event_id)
        if intent is not None and result is None:
            self.log.append("tool.result", {"tool": call["tool"], "intent_id": intent.id, "ok": False, "result": None,
                                            "error": "interrupted: the client stopped waiting for this call"},
                            run_id=self.run_id, key=keys.tool_result(intent.id))

    def settle(self, call: dict[str, Any], call_event_id: int) -> dict[str, Any] | None:
        """The result of a call the server finished (its tool.result is in the shared log), else None."""
        tool = call["tool"]
        if tool not in RECOVERABLE:
            return None
        intent, result = self.server_call(call, call_event_id)
        if intent is None:
            return None
        if result is None:
            return self._settle_from_note(call, intent) if tool == "note" else self._settle_from_attempt(call, intent)
        body = result.payload.get("result")
        structured = dict(body) if isinstance(body, dict) else None
        if tool == "note" and isinstance(body, dict) and body.get("note_id") is not None:
            structured = {"id": body["note_id"]}
        answer = ToolAnswer(bool(result.payload.get("ok")), recovered_text(tool, result.payload), structured)
        return call_result(call, answer, "recovered")

    def _settle_from_attempt(self, call: dict[str, Any], intent: Event) -> dict[str, Any] | None:
        """A compile/profile whose verdict the server logged (its attempt event) but not its result: the
        candidate was judged, so it is not judged again; the server's intent is closed with it."""
        if call["tool"] not in ("compile", "profile"):
            return None
        found = [e for e in self.log.events(run_id=self.run_id, kinds=["attempt"], after_id=intent.id, limit=50)
                 if e.payload.get("intent_id") == intent.id]
        if not found:
            return None
        att = found[0]
        structured = attempt_report(att)
        self.log.append("tool.result", {"tool": call["tool"], "intent_id": intent.id, "ok": bool(structured["ok"]),
                                        "result": structured, "error": att.payload.get("error")},
                        run_id=self.run_id, key=keys.tool_result(intent.id))
        text = recovered_text(call["tool"], {"result": structured})
        return call_result(call, ToolAnswer(bool(structured["ok"]) and att.payload.get("outcome") in
                                            ("correct", "compiled"), text, structured), "recovered")

    def _settle_from_note(self, call: dict[str, Any], intent: Event) -> dict[str, Any] | None:
        """A note the server wrote (it keeps its intent's id) but whose result it did not log: the note
        exists, so it is read back, not written twice; the server's intent is closed with it."""
        found = [e for e in self.log.events(run_id=self.run_id, kinds=["note"], after_id=intent.id, limit=50)
                 if e.payload.get("intent_id") == intent.id]
        if not found:
            return None
        note_id = found[0].id
        self.log.append("tool.result", {"tool": "note", "intent_id": intent.id, "ok": True,
                                        "result": {"note_id": note_id}, "error": None},
                        run_id=self.run_id, key=keys.tool_result(intent.id))
        return call_result(call, ToolAnswer(True, f"noted (#{note_id}), recovered from the log",
                                            {"id": note_id}), "recovered")


def attempt_report(att: Event) -> dict[str, Any]:
    """A tool result rebuilt from an attempt event (the numbers the server logged for the candidate)."""
    a = att.payload
    outcome = a.get("outcome")
    report: dict[str, Any] = {
        "problem": a.get("problem"), "shape": a.get("shape"), "ok": outcome in ("correct", "compiled", "incorrect"),
        "correct": outcome == "correct", "error_class": a.get("error_class"), "error": a.get("error"),
        "max_rel_err": a.get("max_rel_err"), "speedup": a.get("speedup"), "device": {"name": a.get("device")},
        "attempt_id": att.id, "source_sha": a.get("source_sha"), "recovered_from_attempt": True,
        "verified": a.get("verified") is True, "verification": a.get("verification")}
    if a.get("median_us") is not None:
        report["timing"] = {"median_us": a["median_us"], "spread_pct": a.get("spread_pct"),
                            "mode": a.get("timing_mode")}
    if a.get("baseline"):
        report["baseline"] = {"name": a["baseline"], "median_us": a.get("baseline_us")}
    if a.get("tool") == "compile":
        report["ok"] = outcome == "compiled"
        report["kernels"] = a.get("kernels") or []
    return report
