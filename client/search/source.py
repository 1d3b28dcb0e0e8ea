"""What a kernel source declares for tuning, read without running it, and the rewrite that sets it.

A kernel declares its knobs as module-level constants (`BLOCK_N = 32`) and what may be tried in two
literals beside them: `TUNE_SPACE`, a dict of name -> list of choices, and optionally `TUNE_CONSTRAINTS`
(client.search.space). Everything here reads the source as text or as an AST: a kernel taken from the log
is candidate code, and the client never imports it.

A variant of a kernel is the kernel with some of those constants set to other values and nothing else
changed (`rewrite`). `Variants` recognises variants of one base among the sources in the log and reads
back the configuration each one used, which is how the search's history is rebuilt from the log alone.
"""

from __future__ import annotations

import ast
import hashlib
import re
from typing import Any

Config = dict[str, Any]

SPACE_NAME = "TUNE_SPACE"
CONSTRAINTS_NAME = "TUNE_CONSTRAINTS"


class TuneSpaceError(ValueError):
    """The source declares no usable search space (or its declaration is malformed)."""


def assignments(tree: ast.Module) -> dict[str, ast.expr]:
    """The value of the first module-level assignment of each name (what `rewrite` changes)."""
    found: dict[str, ast.expr] = {}
    for node in tree.body:
        target, value = _assignment(node)
        if target is not None and value is not None and target not in found:
            found[target] = value
    return found


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return node.target.id, node.value
    return None, None


def module_constants(source: str) -> set[str]:
    """Names assigned at module level: what `rewrite` can change."""
    return set(assignments(ast.parse(source)))


def literal_constants(source: str) -> Config:
    """The module-level names whose (first) value is a literal, with that value."""
    out: Config = {}
    for name, value in assignments(ast.parse(source)).items():
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
    return out


def declarations(source: str) -> tuple[Any, Any, Config]:
    """(TUNE_SPACE, TUNE_CONSTRAINTS or None, the literal module constants) of a source, as literals.

    Raises TuneSpaceError when there is no TUNE_SPACE or a declaration is not a literal, SyntaxError
    when the source does not parse."""
    tree = ast.parse(source)
    values = assignments(tree)
    if SPACE_NAME not in values:
        raise TuneSpaceError(f"the source declares no {SPACE_NAME}")
    raw: dict[str, Any] = {}
    for name in (SPACE_NAME, CONSTRAINTS_NAME):
        if name in values:
            try:
                raw[name] = ast.literal_eval(values[name])
            except ValueError as exc:
                raise TuneSpaceError(f"{name} must be a literal: {exc}") from None
    constants = literal_constants(source)
    return raw[SPACE_NAME], raw.get(CONSTRAINTS_NAME), constants


def tune_space(source: str) -> tuple[dict[str, list[Any]], Config]:
    """(TUNE_SPACE as name -> list of choices, the current values of its names), read without running it."""
    raw, _, constants = declarations(source)
    if not isinstance(raw, dict) or not all(isinstance(v, (list, tuple)) and v for v in raw.values()):
        raise TuneSpaceError(f"{SPACE_NAME} must map names to non-empty lists of values")
    space = {str(k): list(v) for k, v in raw.items()}
    missing = [k for k in space if k not in constants]
    if missing:
        raise TuneSpaceError(f"{SPACE_NAME} names {missing} have no module-level literal assignment to rewrite")
    return space, {k: constants[k] for k in space}


def rewrite(source: str, config: Config) -> str:
    """The source with the module-level constants in `config` set to the given values (the first
    assignment of each name; everything else byte for byte as it was)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    for name, value in assignments(tree).items():
        if name in config and value.end_lineno is not None:
            start = offsets[value.lineno - 1] + _byte_col(lines[value.lineno - 1], value.col_offset)
            end = offsets[value.end_lineno - 1] + _byte_col(lines[value.end_lineno - 1], value.end_col_offset or 0)
            edits.append((start, end, repr(config[name])))
    out = source
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[end:]
    return out


def _byte_col(line: str, col: int) -> int:
    """ast column offsets count UTF-8 bytes; string indices count characters."""
    return len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))


class Variants:
    """Recognises the variants of one base source: the same text but for the values of the knobs.

    A source's "skeleton" is its text with the value of each knob's first module-level assignment cut
    out. Two sources with the same skeleton differ only in knob values, so the base's skeleton and the
    values read from a source's own assignments say which configuration of the base it is. Reading is a
    text scan, not a parse: a resumed day-long run reads thousands of logged sources back this way.
    """

    def __init__(self, base: str, names: tuple[str, ...]) -> None:
        self.base = base
        self.names = names
        alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        self._pattern = re.compile(rf"^(?P<name>{alternatives})(?P<head>[ \t]*(?::[^=\n]*)?=[ \t]*)"
                                   rf"(?P<value>[^\n]*?)(?P<tail>[ \t]*(?:#[^\n]*)?)$", re.M)
        skeleton = self._read(base)
        self._skeleton = skeleton[0] if skeleton is not None else None
        self._seen: dict[str, Config | None] = {}

    def config_of(self, source: str) -> Config | None:
        """The configuration a variant of the base uses (every knob's value), else None."""
        digest = hashlib.sha256(source.encode("utf-8", errors="replace")).hexdigest()
        if digest not in self._seen:
            read = self._read(source)
            self._seen[digest] = read[1] if read is not None and read[0] == self._skeleton else None
        found = self._seen[digest]
        return dict(found) if found is not None else None

    def render(self, config: Config) -> str:
        """The base with these knob values."""
        return rewrite(self.base, config)

    def _read(self, source: str) -> tuple[str, Config] | None:
        parts: list[str] = []
        config: Config = {}
        last = 0
        for match in self._pattern.finditer(source):
            name = match.group("name")
            if name in config:
                continue
            try:
                config[name] = ast.literal_eval(match.group("value"))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
            parts.append(source[last:match.start("value")])
            last = match.end("value")
        if len(config) != len(self.names):
            return None
        parts.append(source[last:])
        return "\x00".join(parts), config
