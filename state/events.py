"""The event kinds: a public schema shared by the server, the client and the CLI.

Every event is (id, ts, run_id, kind, payload, key). The payload is a JSON object; for the kinds
below, `validate` checks that the required fields are present and have the right types, and
rejects a malformed event with a ValueError before anything is written. Fields beyond those listed
are kept as they are, and kinds not listed here are accepted unchecked (forward compatibility: a
newer client may log kinds this code does not know).

JSON has no NaN or infinity, and SQLite's JSON functions reject the bare tokens, so non-finite
floats are stored as the strings "NaN", "Infinity" and "-Infinity" (see `state.encoding`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RUN_START = "run.start"
"""A run begins. goal (str, required): the user's goal, verbatim; it is pinned into every prompt.
Commonly also: problem, shape, target_speedup, budget {...}, model, config {...}."""

RUN_END = "run.end"
"""A run stops. state (str, required): how it ended, e.g. "done", "stopped", "budget", "failed",
"interrupted"; reason (str | None, required): why, in a sentence."""

TOOL_INTENT = "tool.intent"
"""Logged before a tool runs, so a crash mid-call is visible on resume. tool (str), args_digest (str:
`intent_key(tool, args)`, also used as the event's idempotency key), args (object): required;
client (str | None), session (str | None): who called, optional."""

TOOL_RESULT = "tool.result"
"""Logged when a tool returns. tool (str), intent_id (int: the id of its tool.intent event),
ok (bool): required; result (any JSON), error (str | None): optional."""

ATTEMPT = "attempt"
"""One candidate kernel judged by a tool: the unit that best-so-far, the attempt ledger and the
failure counts are computed from. Required: problem (str), shape (str: a shape name such as "bench"),
source_sha (str: `put_source(text)`), tool ("profile" | "compile"), outcome (one of `OUTCOMES`),
device (str, e.g. "NVIDIA H200" or "cpu"). Optional (None when unknown): error_class (str), error
(str), max_rel_err (float), median_us (float), spread_pct (float), speedup (float). Anything else
(baseline_us, roofline share, compile resources, telemetry, ...) is kept.

How the verdict was reached, also optional:
- verified (bool): true only when the trusted judge (a process where candidate code never ran)
  produced the verdict and every one of its checks passed. An attempt without the field, which is
  every attempt logged before the field existed, is unverified, and so is one with false. Only
  verified correct attempts count for best-so-far and for a goal; the others stay in the log, in
  the ledger and in the failure counts.
- verification (str | None): how it was verified, e.g. "judge:v1" (correctness checked by the judge,
  not timed: a CPU attempt), "judge:v1+bounds" (GPU-timed, the timing within the judge's outside
  bounds), "judge:v1+bounds+census" (and an Nsight kernel census agreed). Required, non-empty, when
  verified is true.
Read back (state.views), every attempt has both: verified False and verification None when absent.
The log is append-only, so attempts logged before are never rewritten: the views mark them."""

NOTE = "note"
"""Something learned, written by the agent or a person. text (str, required); problem (str | None),
shape (str | None), tags (list of str): optional."""

COMPACTION = "compaction"
"""The client condensed its context. Free-form; usually tokens_before, tokens_after, summary (str),
first_id and last_id (the events the summary covers). Compaction hides events from the prompt; it
never deletes them from the log."""

BUDGET = "budget"
"""Spend so far, as cumulative totals (the newest budget event of a run is its state, so a resumed
run reloads it instead of starting from zero). Free-form; usually tokens_in, tokens_out, cost_usd,
tool_calls, wall_s, and the limits."""

BASELINE = "baseline"
"""A measured baseline. problem (str), shape (str), results (any JSON: per-baseline timings):
required; the fields that key a cached measurement (device, dtype, torch, triton, ...) alongside."""

CENSUS = "census"
"""A kernel census of one source (tools.census): which kernels its entry() ran under Nsight Compute, and the
verdict. problem, shape, source_sha, device (str), result (object: status "passed" or "refused", kernels [...],
reason): written by the server, keyed `census:<source_sha>:<problem>:<shape>:<device>`, so a source is
censused once per device and shape."""

MODEL_TURN = "model.turn"
"""One model call of the bundled client. Free-form; usually provider, model, tokens_in, tokens_out,
latency_s, stop_reason and the tool calls requested."""

RUN_RESUME = "run.resume"
"""A run continues in a new process after a stop (kill, crash, power loss). pid (int), host (str):
required, so liveness can be checked; reason (str), dangling (int: calls found without a result), extend
(object: new limits from `marathon resume`, budget {steps, hours, tokens, cost_usd} as totals and deadline
(unix time), replacing the run's own from this event on): optional. Spend is not reset: it is reloaded from
the run's events."""

AGENT_CALL = "agent.call"
"""The bundled client is about to run one tool step, committed before the call is sent. step (int:
1, 2, 3, ... within the run, contiguous), call_id (str: also sent to the server in `_meta`
kernel-marathon/call_id, so the server's tool.intent key contains it), tool (str), args (object):
required; turn (int), fingerprint (str: of a candidate source), key (list) optional."""

AGENT_RESULT = "agent.result"
"""The result of one tool step as the client's transcript shows it; exactly one per agent.call.
step (int), call_id (str), tool (str), ok (bool), status (str: "ok", "tool_error", "from_log" (a
source already tried, answered from the log), "recovered" (the server's logged result, read back on
resume), "interrupted", "timeout", "disconnected", "client_error"), text (str): required; structured
(object), attempt (object: the judged candidate's numbers) optional."""

MODEL_ERROR = "model.error"
"""A model call failed (after the provider's own retries). message (str), retryable (bool):
required; the loop waits and asks again, or ends the run when the error is not retryable."""

OUTCOMES: tuple[str, ...] = (
    "correct",
    "incorrect",
    "compile_error",
    "rejected",
    "timeout",
    "crashed",
    "error",
    "compiled",
)
"""Attempt outcomes. "compiled" is a successful `compile` (no correctness run), so it is neither a
success for best-so-far nor a failure."""

OUTCOME_BY_ERROR_CLASS: dict[str | None, str] = {
    None: "correct", "incorrect": "incorrect", "nan": "incorrect", "wrong_shape": "incorrect",
    "wrong_output": "incorrect", "input_mutated": "incorrect", "rejected": "rejected",
    "syntax_error": "compile_error", "compile_error": "compile_error", "import_error": "compile_error",
    "capture_error": "compile_error", "no_kernel": "compile_error", "timeout": "timeout",
    "crashed": "crashed", "cuda_error": "crashed", "cancelled": "error", "needs_gpu": "error",
    # The judge's refusals of a timing or of the kernels that ran, and of a candidate that broke the protocol.
    "impossible_timing": "rejected", "timing_mismatch": "rejected", "census_failed": "rejected",
    "protocol_error": "rejected", "runtime_error": "error", "internal_error": "error",
}
"""The attempt outcome for each error class the tools report (None: no error). Unknown classes are
"error". Kept here, with the event schema, so the server that writes attempts and a client that reads
results (possibly from a remote server) classify alike."""


def outcome_for(tool: str, ok: bool, error_class: str | None) -> str:
    """The outcome of a compile or profile attempt from its result's `ok` and `error_class`."""
    if ok and error_class is None:
        return "compiled" if tool == "compile" else "correct"
    if error_class is None:  # a failure that names no class
        return "error"
    return OUTCOME_BY_ERROR_CLASS.get(error_class, "error")

ATTEMPT_TOOLS: tuple[str, ...] = ("profile", "compile")

_NUMBER = "number"  # int or float, but not bool


@dataclass(frozen=True)
class FieldSpec:
    """One payload field: its accepted types, whether it must be present, and allowed values."""

    name: str
    types: tuple[Any, ...]  # Python types, or _NUMBER
    required: bool = True
    nullable: bool = False
    choices: tuple[str, ...] | None = None

    def check(self, kind: str, payload: Mapping[str, Any]) -> None:
        if self.name not in payload:
            if self.required:
                raise ValueError(f"{kind!r} event payload lacks the required field {self.name!r}")
            return
        value = payload[self.name]
        if value is None:
            if self.nullable:
                return
            raise ValueError(f"{kind!r} event payload field {self.name!r} may not be null")
        if not any(_is_type(value, t) for t in self.types):
            wanted = " | ".join("number" if t == _NUMBER else t.__name__ for t in self.types)
            raise ValueError(
                f"{kind!r} event payload field {self.name!r} must be {wanted}"
                f"{' | None' if self.nullable else ''}, got {type(value).__name__} {value!r:.80}"
            )
        if self.choices is not None and value not in self.choices:
            raise ValueError(
                f"{kind!r} event payload field {self.name!r} must be one of {', '.join(self.choices)};"
                f" got {value!r:.80}"
            )


def _is_type(value: Any, t: Any) -> bool:
    if t == _NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, t)


def _f(name: str, *types: Any, required: bool = True, nullable: bool = False,
       choices: tuple[str, ...] | None = None) -> FieldSpec:
    return FieldSpec(name, types, required, nullable, choices)


SCHEMAS: dict[str, tuple[FieldSpec, ...]] = {
    RUN_START: (_f("goal", str),),
    RUN_END: (_f("state", str), _f("reason", str, nullable=True)),
    TOOL_INTENT: (
        _f("tool", str),
        _f("args_digest", str),
        _f("args", dict),
        _f("client", str, required=False, nullable=True),
        _f("session", str, required=False, nullable=True),
    ),
    TOOL_RESULT: (
        _f("tool", str),
        _f("intent_id", int),
        _f("ok", bool),
        _f("error", str, required=False, nullable=True),
    ),
    ATTEMPT: (
        _f("problem", str),
        _f("shape", str),
        _f("source_sha", str),
        _f("tool", str, choices=ATTEMPT_TOOLS),
        _f("outcome", str, choices=OUTCOMES),
        _f("device", str),
        _f("error_class", str, required=False, nullable=True),
        _f("error", str, required=False, nullable=True),
        _f("max_rel_err", _NUMBER, required=False, nullable=True),
        _f("median_us", _NUMBER, required=False, nullable=True),
        _f("spread_pct", _NUMBER, required=False, nullable=True),
        _f("speedup", _NUMBER, required=False, nullable=True),
        _f("verified", bool, required=False),
        _f("verification", str, required=False, nullable=True),
    ),
    NOTE: (
        _f("text", str),
        _f("problem", str, required=False, nullable=True),
        _f("shape", str, required=False, nullable=True),
        _f("tags", list, required=False, nullable=True),
    ),
    COMPACTION: (),
    BUDGET: (),
    BASELINE: (_f("problem", str), _f("shape", str), _f("results", object)),
    MODEL_TURN: (),
    RUN_RESUME: (_f("pid", int), _f("host", str)),
    AGENT_CALL: (_f("step", int), _f("call_id", str), _f("tool", str), _f("args", dict)),
    AGENT_RESULT: (
        _f("step", int),
        _f("call_id", str),
        _f("tool", str),
        _f("ok", bool),
        _f("status", str),
        _f("text", str),
    ),
    MODEL_ERROR: (_f("message", str), _f("retryable", bool)),
}
"""The checked kinds and their fields. A kind with no fields is only checked to be an object."""

ATTEMPT_OPTIONAL: tuple[str, ...] = tuple(f.name for f in SCHEMAS[ATTEMPT] if not f.required)
ATTEMPT_FLOATS: tuple[str, ...] = ("max_rel_err", "median_us", "spread_pct", "speedup")


def validate(kind: str, payload: Any) -> None:
    """Raise ValueError unless `payload` is a JSON object fit for `kind` (unknown kinds: any object)."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"event kind must be a non-empty string, got {kind!r}")
    if not isinstance(payload, Mapping):
        raise ValueError(f"{kind!r} event payload must be a JSON object (dict), got {type(payload).__name__}")
    for spec in SCHEMAS.get(kind, ()):
        spec.check(kind, payload)
    if kind == ATTEMPT and payload.get("verified") is True and not payload.get("verification"):
        raise ValueError("'attempt' event payload says verified but not how: 'verification' must name the checks")
    if kind == NOTE and payload.get("tags") is not None:
        if not all(isinstance(t, str) for t in payload["tags"]):
            raise ValueError("'note' event payload field 'tags' must be a list of strings")


def is_finite_number(value: Any) -> bool:
    """True for an int or a finite float (not bool): what counts as a timing."""
    return _is_type(value, _NUMBER) and math.isfinite(value)
