"""Compaction: when the conversation grows past a threshold, older turns become a structured summary.

Early and real: the default threshold is well under the model's window (45%), and a compaction must
remove at least `min_share` of the context (it hides more turns until it does), so the run does not
compact again every turn. The last turns stay verbatim, the first user message always stays, and the
pinned block is rebuilt from the log every turn anyway, so the goal never depends on the summary.

The summary has four parts: strategies and outcomes, what the profiler said, open hypotheses, next
steps. A model policy writes it in a summarisation turn (its tokens count in the budget); the
deterministic version, built from the log, serves the tuner, scripted runs, and any model whose
summarisation call fails. Either way the compaction is an event; the hidden turns stay in the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from client.policy import Message, Policy, Turn, TurnContext
from client.run_projection import AttemptRec, RunState, fmt_us
from client.transcript import Transcript, TurnEntry

MODEL_FREE = frozenset({"tuner", "scripted"})
STEP_LINES = 30  # step lines a deterministic summary keeps; older steps are counted, not listed

SUMMARY_REQUEST = """\
Older turns of this conversation are about to be hidden to keep the context small. Write the summary that
will stand in for them, for yourself to continue from. Use exactly these four headings:
## Strategies and outcomes
(each idea tried, with the numbers the tools reported: correct or not, time, speedup, the error class)
## What the profiler said
(registers, spills, time, speedup, bandwidth, errors and their lines: the facts to keep)
## Open hypotheses
## Next steps
Be specific and brief (under 600 words). The goal, the best kernel and the notes are pinned separately."""


@dataclass(frozen=True)
class CompactionConfig:
    context_window: int = 200_000
    threshold: int | None = None  # tokens; default: threshold_share of the window
    threshold_share: float = 0.45
    keep_turns: int = 6  # turns kept verbatim (fewer when that is what it takes to shrink enough)
    min_share: float = 0.3  # each compaction removes at least this share of the context
    summary_tokens: int = 2_000  # longest summary kept

    @property
    def limit(self) -> int:
        return self.threshold if self.threshold is not None else int(self.context_window * self.threshold_share)


@dataclass
class Plan:
    hidden: list[TurnEntry]
    kept: list[TurnEntry]
    cut_id: int


def plan(transcript: Transcript, fixed_chars: int, cfg: CompactionConfig) -> Plan | None:
    """Which turns to hide so the context shrinks by at least min_share; None when nothing can go.

    fixed_chars: what stays whatever is hidden (system prompt, tools, pinned block, first message).
    The summary's size is not known yet; it is counted at its cap.
    """
    entries = transcript.entries
    if len(entries) < 2:
        return None
    total = fixed_chars + transcript.chars()
    summary_chars = cfg.summary_tokens * 4
    keep = min(cfg.keep_turns, len(entries) - 1)
    while keep >= 1:
        hidden = entries[:len(entries) - keep]
        old = sum(e.chars for e in hidden) + (len(transcript.summary) if transcript.summary else 0)
        if total > 0 and (old - summary_chars) / total >= cfg.min_share:
            break
        keep -= 1
    keep = max(keep, 1)
    hidden = entries[:len(entries) - keep]
    return Plan(hidden=hidden, kept=entries[len(entries) - keep:], cut_id=max(e.last_event_id for e in hidden))


def _step_line(rec: AttemptRec) -> str:
    return f"- step {rec.step} {rec.tool}: {rec.numbers()}"


def log_summary(state: RunState, hidden: list[TurnEntry], turn_texts: dict[int, str]) -> str:
    """The deterministic summary: everything in it is read from the log (via the RunState)."""
    last_step = max((s for e in hidden for s in e.steps), default=0)
    last_turn = hidden[-1].turn if hidden else 0
    lines = [f"[summary of turns 1-{last_turn} (steps 1-{last_step}), from the event log, which keeps the full "
             "record: `attempts` and `attempt` read it back]", "## Strategies and outcomes"]
    done = [a for a in state.attempts if a.step is not None and a.step <= last_step]
    if len(done) > STEP_LINES:
        older = done[:-STEP_LINES]
        counts: dict[str, int] = {}
        for a in older:
            counts[a.outcome] = counts.get(a.outcome, 0) + 1
        lines.append(f"- {len(older)} earlier attempts: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        done = done[-STEP_LINES:]
    for rec in done:
        text = turn_texts.get(rec.step or 0, "")
        lines.append(_step_line(rec) + (f" ({text})" if text else ""))
    if not done:
        lines.append("- no compile or profile in these turns")
    lines.append("## What the profiler said")
    profiles = [a for a in done if a.tool == "profile"][-5:]
    for rec in profiles:
        extra = f", baseline {rec.baseline} {fmt_us(rec.baseline_us)} us" if rec.baseline_us else ""
        lines.append(f"- step {rec.step}: {rec.numbers()}{extra}" + (f" on {rec.device}" if rec.device else ""))
    if not profiles:
        lines.append("- no profile in these turns")
    lines.append("## Open hypotheses")
    hyps = [n for n in state.notes if any(t.lower() in ("hypothesis", "idea", "open") for t in n.tags)]
    lines.extend(f"- note #{n.id}: {' '.join(n.text.split())[:300]}" for n in hyps[-5:])
    if not hyps:
        lines.append("- none recorded (record them with `note`, tags ['hypothesis'])")
    lines.append("## Next steps")
    nexts = [n for n in state.notes if any(t.lower() in ("next", "todo", "plan") for t in n.tags)]
    lines.extend(f"- note #{n.id}: {' '.join(n.text.split())[:300]}" for n in nexts[-3:])
    if state.best is not None:
        ident = f"attempt #{state.best.attempt_id}" if state.best.attempt_id is not None else "the best attempt"
        lines.append(f"- continue from the best kernel, {ident} ({state.best.numbers()}): `best` returns its source")
    else:
        lines.append("- get a correct kernel first: start from the problem's starter")
    if state.streak >= 3:
        lines.append(f"- the last {state.streak} attempts failed with {state.streak_class}: change approach")
    return "\n".join(lines)


def wants_model_summary(policy: Policy) -> bool:
    """Model policies summarise in a turn of their own; model-free ones get the log's summary."""
    flag = getattr(policy, "summarizes", None)
    if flag is not None:
        return bool(flag)
    return policy.name not in MODEL_FREE


def summary_context(system: str, first: Message, previous: str | None, hidden: list[TurnEntry],
                    pinned: dict[str, Any]) -> TurnContext:
    """The context of a summarisation turn: what is about to be hidden, then the request. No tools."""
    messages = [first]
    if previous:
        messages.append(Message(role="user", content=previous))
    for entry in hidden:
        messages.extend(entry.messages)
    messages.append(Message(role="user", content=SUMMARY_REQUEST))
    return TurnContext(system=system, messages=messages, tools=[], pinned=pinned,
                       max_output_tokens=1500)


def model_summary_text(turn: Turn, facts: str, cfg: CompactionConfig) -> str:
    """The model's summary, capped, followed by the log's own list of steps (numbers that cannot drift)."""
    text = turn.text.strip()
    cap = cfg.summary_tokens * 4 * 2 // 3
    if len(text) > cap:
        text = text[:cap] + "\n[summary cut]"
    steps = facts.split("## What the profiler said")[0].split("## Strategies and outcomes", 1)[-1].strip()
    return f"{text}\n\n## Steps, as the log records them\n{steps}"
