"""Tool results as the client records and shows them: trimmed, summarised, or read back from the log.

A result enters the log once (agent.result) with the text the model saw and the structured content
minus the bulk (assembly, per-trial tensors' details beyond a few). Three results never come from a
live call, and their text says so: a profile of a source already tried (answered from the log), a
result the server logged before the client died (recovered on resume), and a call that was in
flight when the run stopped and is not safe to repeat (interrupted).
"""

from __future__ import annotations

import json
from typing import Any

from client.runstate import AttemptRec, fmt_us

TEXT_CHARS = 50_000  # the longest result text the log keeps (the transcript shows less)
BULKY = ("ptx", "sass", "ttgir", "llir", "asm")


def trim_structured(structured: dict[str, Any] | None) -> dict[str, Any] | None:
    """The structured content without assembly and with at most a few trials."""
    if not isinstance(structured, dict):
        return None
    out = dict(structured)
    if isinstance(out.get("kernels"), list):
        out["kernels"] = [{k: v for k, v in kern.items() if k not in BULKY} if isinstance(kern, dict) else kern
                          for kern in out["kernels"]]
    if isinstance(out.get("trials"), list) and len(out["trials"]) > 4:
        out["trials"] = out["trials"][:4]
        out["trials_cut"] = True
    return out  # a `best` result keeps its source: the run state reads the best kernel from it


def repeat_text(rec: AttemptRec, run_id: str) -> str:
    """The answer to a profile of a source already tried."""
    where = f"at step {rec.step} of this run" if rec.step is not None and rec.run_id in (None, run_id) else (
        f"in run {rec.run_id}" if rec.run_id else "earlier")
    ident = f"attempt #{rec.attempt_id}" if rec.attempt_id is not None else "an attempt"
    return (f"Already tried: this source (the same tokens, comments and spacing aside) was profiled {where} as "
            f"{ident}: {rec.numbers()}. Answered from the event log; nothing was run. Change the kernel to learn "
            "something new.")


def recovered_text(tool: str, result_payload: dict[str, Any]) -> str:
    """A result the server logged before the client stopped, read back from the log on resume."""
    body = result_payload.get("result")
    head = f"[recovered from the event log: the server finished this {tool} call before the client stopped]"
    if tool == "profile" and isinstance(body, dict):
        return head + "\n" + profile_summary(body)
    if tool == "compile" and isinstance(body, dict):
        return head + "\n" + compile_summary(body)
    if tool == "note" and isinstance(body, dict):
        return head + f"\nnoted (#{body.get('note_id')})"
    text = json.dumps(body, default=str)
    if result_payload.get("error"):
        text = f"error: {result_payload['error']}\n{text}"
    return head + "\n" + text[:4000]


def profile_summary(r: dict[str, Any]) -> str:
    dev = r.get("device") or {}
    name = dev.get("name", "?") if isinstance(dev, dict) else str(dev)
    verdict = "correct" if r.get("correct") else f"NOT OK [{r.get('error_class')}]"
    lines = [f"profile {r.get('problem')}/{r.get('shape')} on {name}: {verdict}"]
    if r.get("error"):
        lines.append(f"  error: {str(r['error'])[:1000]}")
    if r.get("max_rel_err") is not None:
        lines.append(f"  max relative error {r['max_rel_err']:.2e}")
    t = r.get("timing") or {}
    if t.get("median_us") is not None:
        lines.append(f"  time {t['median_us']:.2f} us median (IQR {t.get('spread_pct') or 0:.1f}%)")
        b = r.get("baseline") or {}
        if b.get("median_us"):
            lines.append(f"  baseline {b.get('name')}: {b['median_us']:.2f} us -> speedup {r.get('speedup') or 0:.2f}x")
    elif r.get("timing_note"):
        lines.append(f"  {r['timing_note']}")
    if r.get("attempt_id") is not None:
        lines.append(f"  logged as attempt {r['attempt_id']}")
    return "\n".join(lines)


def compile_summary(r: dict[str, Any]) -> str:
    verdict = "ok" if r.get("ok") else f"FAILED [{r.get('error_class')}]"
    lines = [f"compile {r.get('problem')}/{r.get('shape')}: {verdict}"]
    for k in r.get("kernels") or []:
        lines.append(f"  {k.get('name')}: {k.get('registers')} regs, {k.get('spill_bytes')} B spilled, "
                     f"{k.get('shared_bytes')} B shared")
    for e in r.get("errors") or []:
        lines.append(f"  error: {e.get('message')}" + (f" (line {e['line']})" if e.get("line") else ""))
    return "\n".join(lines)


def interrupted_text(tool: str) -> str:
    return (f"interrupted: the run stopped while this {tool} call was in flight and the log does not show that it "
            f"completed. {tool} is not safe to repeat blindly, so it was not re-sent; call it again if it is "
            "still wanted.")


def short_outcome(payload: dict[str, Any]) -> str:
    """One phrase for the progress line: the verdict and numbers of a step."""
    attempt = payload.get("attempt")
    status = payload.get("status", "ok")
    if status == "from_log":
        return "already tried (answered from the log)"
    if isinstance(attempt, dict):
        rec = AttemptRec.from_dict(attempt)
        text = rec.outcome
        if rec.median_us is not None:
            text += f" {fmt_us(rec.median_us)}us"
        if rec.speedup is not None:
            text += f" {rec.speedup:.3g}x"
        return text + ("" if status == "ok" or status == "tool_error" else f" ({status})")
    if status in ("ok",):
        return "ok"
    first = (payload.get("text") or "").strip().splitlines()
    return f"{status}: {first[0][:60] if first else ''}".rstrip(": ")
