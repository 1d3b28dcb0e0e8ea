"""Tool results as the client records and words them: trimmed for the log, or answered from the log.

A result enters the log once (agent.result) with the text the model saw and the structured content
minus the bulk (assembly, per-trial tensors' details beyond a few). A live result's text is the one
the server sent over MCP. Three results never come from a live call, and the client words them itself
(it reaches the server through MCP only, so it shares none of the server's code): a profile of a source
already tried (answered from the log), a result the server logged before the client died (recovered on
resume), and a call that was in flight when the run stopped and is not safe to repeat (interrupted).
"""

from __future__ import annotations

import json
import time
from typing import Any

from client.mcp_link import ToolAnswer
from client.run_projection import AttemptRec, attempt_from_result, fmt_us

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


def call_result(call: dict[str, Any], answer: ToolAnswer, status: str, rerun: bool = False) -> dict[str, Any]:
    """What the log keeps of a call's answer (its agent.result, less the step, call_id and tool): ok, status,
    the text (cut to TEXT_CHARS), the structured content less the bulk, and the attempt it made, if any."""
    tool, args = call["tool"], call.get("args") or {}
    structured = trim_structured(answer.structured)
    out: dict[str, Any] = {"ok": answer.ok, "status": status, "text": answer.text[:TEXT_CHARS]}
    if structured is not None:
        out["structured"] = structured
    if rerun:
        out["rerun"] = True
    rec = attempt_from_result(tool, args, answer.structured, ts=time.time(), step=int(call["step"]),
                              fp=call.get("fingerprint"))
    if rec is not None:
        out["attempt"] = rec.as_dict()
    return out


def repeat_text(rec: AttemptRec, run_id: str) -> str:
    """The answer to a profile of a source already tried."""
    if rec.run_id == run_id:  # numbered within this run
        which = f"in this run as {rec.ident(run_id)}"
    elif rec.run_id is None and rec.step is not None:
        which = f"at step {rec.step} of this run"
    else:
        which = (f"in run {rec.run_id}" if rec.run_id else "earlier") + (
            f" as attempt event #{rec.attempt_id}" if rec.attempt_id is not None else "")
    return (f"Already tried: this source (the same tokens, comments and spacing aside) was profiled {which}: "
            f"{rec.numbers()}. Answered from the event log; nothing was run. Change the kernel to learn "
            "something new.")


def recovered_text(tool: str, result_payload: dict[str, Any]) -> str:
    """A result the server logged before the client stopped, read back from the log on resume: for a
    compile or profile its verdict and numbers in one line, as `repeat_text` words them, then the logged
    result itself (without assembly), so the model has every number the live answer had."""
    body = result_payload.get("result")
    head = f"[recovered from the event log: the server finished this {tool} call before the client stopped]"
    if tool == "note" and isinstance(body, dict):
        return head + f"\nnoted (#{body.get('note_id')})"
    lines = [head]
    structured = body if isinstance(body, dict) else None
    rec = attempt_from_result(tool, {}, structured, ts=0.0, step=0, fp=None)
    if rec is not None and structured is not None:
        logged = f"; logged as attempt {rec.attempt_id}" if rec.attempt_id is not None else ""
        lines.append(f"{tool} {structured.get('problem')}/{structured.get('shape')}: {rec.numbers()}{logged}")
    text = json.dumps(trim_structured(structured) if structured is not None else body, default=str)
    if result_payload.get("error"):
        text = f"error: {result_payload['error']}\n{text}"
    lines.append(text[:4000])
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
