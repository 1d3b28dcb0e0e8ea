"""`tuner`: a policy with no model. It searches a kernel's declared launch parameters, one profile a turn.

A kernel declares what may be tuned in a module-level dict, `TUNE_SPACE = {"NUM_WARPS": [2, 4, 8],
"BLOCK_N": [16, 32, 64]}`, next to module-level constants of the same names. The tuner starts from the
best kernel in the log (the `best` tool), else the problem's starter (`problem://{name}/starter`),
and proposes one variant per turn: the source with those constants rewritten, nothing else changed.
Variants nearest the current best configuration come first (one parameter changed, then two, ...),
so on a GPU it climbs toward the fastest configuration; on a CPU, where profile only checks
correctness and "best" is the newest correct attempt, it still walks the space and ends.

It never proposes a source already tried (the loop hands it the fingerprints of every profiled
source for the problem and shape, from the log), and when the space is exhausted it records a note
with what it found and stops. Everything it needs is in the pinned state and the newest tool result,
so it picks up where it was after a restart.
"""

from __future__ import annotations

import ast
import itertools
import json
import uuid
from collections.abc import Iterator
from typing import Any

from client.fingerprint import attempt_key, fingerprint
from client.policy import ToolCall, Turn, TurnContext

Config = dict[str, Any]


class TuneSpaceError(ValueError):
    """The source declares no usable TUNE_SPACE."""


def tune_space(source: str) -> tuple[dict[str, list[Any]], Config]:
    """(TUNE_SPACE, the current values of its names) read from a source without running it."""
    tree = ast.parse(source)
    space: dict[str, list[Any]] | None = None
    current: Config = {}
    for node in tree.body:
        target, value = _assignment(node)
        if target == "TUNE_SPACE" and value is not None:
            try:
                raw = ast.literal_eval(value)
            except ValueError as exc:
                raise TuneSpaceError(f"TUNE_SPACE must be a literal dict of lists: {exc}") from None
            if not isinstance(raw, dict) or not all(isinstance(v, (list, tuple)) and v for v in raw.values()):
                raise TuneSpaceError("TUNE_SPACE must map names to non-empty lists of values")
            space = {str(k): list(v) for k, v in raw.items()}
    if space is None:
        raise TuneSpaceError("the source declares no TUNE_SPACE")
    for node in tree.body:
        target, value = _assignment(node)
        if target in space and value is not None:
            try:
                current[target] = ast.literal_eval(value)
            except ValueError:
                continue
    missing = [k for k in space if k not in current]
    if missing:
        raise TuneSpaceError(f"TUNE_SPACE names {missing} have no module-level literal assignment to rewrite")
    return space, current


def module_constants(source: str) -> set[str]:
    """Names assigned at module level: what `rewrite` can change."""
    return {name for name, _ in map(_assignment, ast.parse(source).body) if name is not None}


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return node.target.id, node.value
    return None, None


def rewrite(source: str, config: Config) -> str:
    """The source with the module-level constants in `config` set to the given values (the first
    assignment of each name; everything else byte for byte as it was)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    seen: set[str] = set()
    for node in tree.body:
        target, value = _assignment(node)
        if target in config and target not in seen and value is not None and value.end_lineno is not None:
            seen.add(target)
            start = offsets[value.lineno - 1] + _byte_col(lines[value.lineno - 1], value.col_offset)
            end = offsets[value.end_lineno - 1] + _byte_col(lines[value.end_lineno - 1], value.end_col_offset or 0)
            edits.append((start, end, repr(config[target])))
    out = source
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[end:]
    return out


def _byte_col(line: str, col: int) -> int:
    """ast column offsets count UTF-8 bytes; string indices count characters."""
    return len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))


def neighbours(space: dict[str, list[Any]], center: Config) -> Iterator[Config]:
    """Every configuration of the space, nearest `center` first (parameters changed, then index distance)."""
    names = list(space)
    index = {n: (space[n].index(center[n]) if center.get(n) in space[n] else 0) for n in names}

    def distance(combo: tuple[int, ...]) -> tuple[int, int, tuple[int, ...]]:
        changed = sum(1 for n, i in zip(names, combo) if i != index[n])
        steps = sum(abs(i - index[n]) for n, i in zip(names, combo))
        return changed, steps, combo

    combos = sorted(itertools.product(*(range(len(space[n])) for n in names)), key=distance)
    for combo in combos:
        yield {n: space[n][i] for n, i in zip(names, combo)}


def describe(config: Config, center: Config) -> str:
    changed = [f"{k}={v!r} (from {center.get(k)!r})" for k, v in config.items() if center.get(k) != v]
    return ", ".join(changed) if changed else "the base configuration as it is"


class TunerPolicy:
    """Model-free policy: profile one variant of the declared TUNE_SPACE per turn until none is left."""

    name = "tuner"
    summarizes = False

    def __init__(self, model: str | None = None, **options: Any) -> None:
        self.model = model or "tuner"
        self.options = options
        self._asked: dict[str, str] = {}  # call id -> what it was for ("best", "starter")
        self._base: str | None = None
        self._proposed: set[str] = set()
        self._noted = False
        self._counter = 0
        self._session = uuid.uuid4().hex[:6]  # call ids stay unique across restarts of the run

    # -- the turn -----------------------------------------------------------------------------------

    def next_turn(self, context: TurnContext) -> Turn:
        goal = context.pinned["goal"]
        problem, shape = goal["problem"], goal.get("shape") or "bench"
        if self._base is None:
            found = self._answer(context)
            if found is not None:
                self._base = found
            elif "best" not in self._asked.values():
                return self._call("best", {"problem": problem, "shape": shape}, "best",
                                  "tuner: fetch the best kernel in the log to tune from")
            elif "starter" not in self._asked.values():
                return self._call("read_resource", {"uri": f"problem://{problem}/starter"}, "starter",
                                  "tuner: no correct kernel in the log yet; start from the problem's starter")
            else:
                return Turn(text="tuner: neither a best kernel nor a starter could be read; stopping.",
                            stop_reason="end_turn", model=self.model)
        try:
            space, base_config = tune_space(self._base)
        except (TuneSpaceError, SyntaxError) as exc:
            return Turn(text=f"tuner: nothing to tune: {exc}.", stop_reason="end_turn", model=self.model)
        center = self._center(context, space, base_config)
        tried = context.pinned.get("tried") or {}
        for config in neighbours(space, center):
            source = self._base if config == base_config else rewrite(self._base, config)
            fp = fingerprint(source)
            key = attempt_key("profile", {"problem": problem, "shape": shape, "source": source}, fp)
            if fp in self._proposed or key in tried:
                continue
            self._proposed.add(fp)
            args = {"problem": problem, "shape": shape, "source": source}
            return self._call("profile", args, "variant", f"tuner: profile {describe(config, center)} "
                              f"[config {json.dumps(config, sort_keys=True)}]")
        already = any("tuner" in n.get("tags", []) and str(n.get("text", "")).startswith("tuner: searched all")
                      for n in context.pinned.get("notes") or [])
        if not self._noted and not already:
            self._noted = True
            text = self._summary(context, space)
            return self._call("note", {"text": text, "problem": problem, "shape": shape,
                                       "tags": ["tuner", "outcome"]}, "note", "tuner: the space is exhausted")
        return Turn(text=f"tuner: all {_size(space)} configurations of {', '.join(space)} are tried; done.",
                    stop_reason="end_turn", model=self.model)

    # -- helpers ------------------------------------------------------------------------------------

    def _call(self, tool: str, args: dict[str, Any], purpose: str, text: str) -> Turn:
        self._counter += 1
        call_id = f"tuner_{self._session}_{self._counter}_{purpose}"
        self._asked[call_id] = purpose
        return Turn(text=text, tool_calls=(ToolCall(call_id, tool, args),), model=self.model)

    def _answer(self, context: TurnContext) -> str | None:
        """The kernel source the newest tool result carries, when it answers our best/starter question."""
        best = context.pinned.get("best") or {}
        if best.get("source") and best.get("outcome") == "correct":
            return str(best["source"])
        for message in reversed(context.messages):
            if message.role != "tool" or message.tool_call_id not in self._asked:
                continue
            wanted = self._asked[message.tool_call_id] == "starter"
            if wanted and not message.is_error and "def entry" in message.content:
                return message.content
            break
        return None

    def _center(self, context: TurnContext, space: dict[str, list[Any]], base_config: Config) -> Config:
        """The configuration of the best kernel, when it is a variant of this space; else the base's."""
        source = (context.pinned.get("best") or {}).get("source")
        if source:
            try:
                other_space, config = tune_space(source)
                if other_space == space:
                    return config
            except (TuneSpaceError, SyntaxError):
                pass
        return base_config

    def _summary(self, context: TurnContext, space: dict[str, list[Any]]) -> str:
        best = context.pinned.get("best") or {}
        config: Config = {}
        if best.get("source"):
            try:
                config = tune_space(best["source"])[1]
            except (TuneSpaceError, SyntaxError):
                config = {}
        numbers = []
        if best.get("median_us") is not None:
            numbers.append(f"{best['median_us']:,.1f} us")
        if best.get("speedup") is not None:
            numbers.append(f"{best['speedup']:.3g}x")
        where = f"attempt #{best.get('attempt_id')}" if best.get("attempt_id") is not None else "no attempt"
        return (f"tuner: searched all {_size(space)} configurations of {', '.join(space)}. Best: "
                f"{json.dumps(config, sort_keys=True) if config else 'none'} ({where}"
                f"{', ' + ', '.join(numbers) if numbers else ', untimed (no GPU)'}). The launch parameters alone "
                "will not go further: the next gains need changes to the algorithm.")


def _size(space: dict[str, list[Any]]) -> int:
    n = 1
    for values in space.values():
        n *= len(values)
    return n
