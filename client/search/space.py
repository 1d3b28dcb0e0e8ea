"""A kernel's search space: its knobs, their choices, and the combinations ruled out before any is tried.

Declared in the kernel module as two literals beside the constants they name:

    BLOCK_N = 32
    NUM_WARPS = 4
    TUNE_SPACE = {"BLOCK_N": [16, 32, 64, 128], "NUM_WARPS": [2, 4, 8]}
    TUNE_CONSTRAINTS = {
        "the BLOCK_N x 512 fp32 tile stays within 128 registers a thread": "BLOCK_N * 16 <= 128 * NUM_WARPS",
    }

Each constraint maps why it exists to a Python expression over the knob names that is true for a valid
configuration. The expressions may use numbers, strings, None, arithmetic (+ - * / // %), comparisons
(including `in` a tuple and `is None`), and/or/not, `a if c else b` and min/max/abs; nothing else (no
attributes, subscripts, other calls, `**`, names that are not knobs), so evaluating one runs no code
of the kernel's. Constraints rule out what is known to fail (shared memory past sm_90's 227 KB a block,
a combination `entry()` refuses) and configurations equal in effect to another one (a knob ignored
unless another is set is pinned to its default there), so the search spends no profile on a certain
failure and measures no kernel twice under two names.
"""

from __future__ import annotations

import ast
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from client.search.source import CONSTRAINTS_NAME, SPACE_NAME, Config, TuneSpaceError, declarations

Key = tuple[int, ...]  # a configuration as the index of each knob's choice, in knob order

_FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs}
_ARITH = "__arith__"  # what every arithmetic operator is evaluated through (see _arith)
_LIMIT = 2**62
_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_OP_NAMES = {op.__name__: fn for op, fn in _OPS.items()}
_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd, ast.BinOp,
          ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Compare, ast.Eq, ast.NotEq, ast.Lt,
          ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Is, ast.IsNot, ast.IfExp, ast.Name, ast.Load,
          ast.Constant, ast.Call, ast.Tuple)


@dataclass(frozen=True)
class Knob:
    """One module-level constant the search may set, and the values it may take (in declared order)."""

    name: str
    choices: tuple[Any, ...]

    @property
    def ordinal(self) -> bool:
        """Numbers in ascending order: neighbouring choices behave alike, which the sampler may use."""
        numbers = all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in self.choices)
        return numbers and all(a < b for a, b in zip(self.choices, self.choices[1:]))

    def index(self, value: Any) -> int:
        """The position of `value` among the choices (ValueError when it is not one)."""
        for i, choice in enumerate(self.choices):
            if type(choice) is type(value) and choice == value:
                return i
        for i, choice in enumerate(self.choices):
            if choice == value and not (isinstance(choice, bool) or isinstance(value, bool)):
                return i  # 1 and 1.0 are one choice
        raise ValueError(f"{value!r} is not a choice of {self.name} ({list(self.choices)})")


@dataclass(frozen=True)
class Constraint:
    """A condition every configuration tried must meet, and why."""

    why: str
    expression: str
    names: frozenset[str]
    code: CodeType = field(repr=False, compare=False)

    def holds(self, config: Config) -> bool:
        try:
            return bool(eval(self.code, {"__builtins__": {}, _ARITH: _arith, **_FUNCTIONS}, config))
        except Exception:
            return False  # cannot be evaluated for these values (None * 2, a division by zero): not valid

    @classmethod
    def parse(cls, why: str, expression: str, knobs: set[str]) -> Constraint:
        try:
            tree = ast.parse(expression, mode="eval")
        except SyntaxError as exc:
            raise TuneSpaceError(f"{CONSTRAINTS_NAME} {why!r}: not an expression: {exc.msg}") from None
        names: set[str] = set()
        for node in ast.walk(tree):
            if not isinstance(node, _NODES):
                raise TuneSpaceError(f"{CONSTRAINTS_NAME} {why!r}: {type(node).__name__} is not allowed in "
                                     f"{expression!r}")
            if isinstance(node, ast.Call):
                if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS) or node.keywords:
                    raise TuneSpaceError(f"{CONSTRAINTS_NAME} {why!r}: only min, max and abs may be called")
            elif isinstance(node, ast.Name) and node.id not in _FUNCTIONS:
                if node.id not in knobs:
                    raise TuneSpaceError(f"{CONSTRAINTS_NAME} {why!r} names {node.id}, which is not in "
                                         f"{SPACE_NAME}")
                names.add(node.id)
            elif isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool, type(None))):
                raise TuneSpaceError(f"{CONSTRAINTS_NAME} {why!r}: constant {node.value!r} is not allowed")
        tree = ast.fix_missing_locations(_Arithmetic().visit(tree))
        return cls(why, expression, frozenset(names), compile(tree, f"<constraint {why}>", "eval"))


def _arith(op: str, a: Any, b: Any) -> Any:
    """One arithmetic operation on numbers only, its result bounded: a declaration read from a logged kernel
    is candidate text, and "x" * 10**12 must not fill the client's memory."""
    if not all(isinstance(v, (int, float)) for v in (a, b)):
        raise TypeError(f"arithmetic on {type(a).__name__} and {type(b).__name__}")
    out = _OP_NAMES[op](a, b)
    if abs(out) > _LIMIT:
        raise OverflowError("a constraint's arithmetic went past 2**62")
    return out


class _Arithmetic(ast.NodeTransformer):
    """Rewrites `a * b` into `__arith__("Mult", a, b)` (and so for every binary operator)."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        return ast.Call(func=ast.Name(_ARITH, ast.Load()),
                        args=[ast.Constant(type(node.op).__name__), node.left, node.right], keywords=[])


@dataclass(frozen=True)
class SearchSpace:
    """Knobs (in declared order) and constraints. A configuration names every knob."""

    knobs: tuple[Knob, ...]
    constraints: tuple[Constraint, ...] = ()

    # -- reading a declaration -----------------------------------------------------------------------

    @classmethod
    def from_source(cls, source: str) -> tuple[SearchSpace, Config]:
        """(the space a source declares, its current value of every knob). TuneSpaceError when there is none,
        it is malformed, or a knob is not a module-level literal the rewrite can set."""
        raw, raw_constraints, constants = declarations(source)
        space = cls.from_literals(raw, raw_constraints)
        missing = [k.name for k in space.knobs if k.name not in constants]
        if missing:
            raise TuneSpaceError(f"{SPACE_NAME} names {missing} have no module-level literal assignment to rewrite")
        return space, {k.name: constants[k.name] for k in space.knobs}

    @classmethod
    def from_literals(cls, raw: Any, raw_constraints: Any = None) -> SearchSpace:
        if not isinstance(raw, dict) or not raw:
            raise TuneSpaceError(f"{SPACE_NAME} must be a non-empty dict of name -> list of choices")
        knobs = []
        for name, choices in raw.items():
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
                raise TuneSpaceError(f"{SPACE_NAME}: {name!r} is not a constant's name")
            if not isinstance(choices, (list, tuple)) or not choices:
                raise TuneSpaceError(f"{SPACE_NAME}[{name!r}] must be a non-empty list of choices")
            if not all(isinstance(c, (int, float, str, bool, type(None))) for c in choices):
                raise TuneSpaceError(f"{SPACE_NAME}[{name!r}]: choices must be numbers, strings, booleans or None")
            knob = Knob(name, tuple(choices))
            if len({(isinstance(c, bool), c) for c in choices}) != len(choices):  # 1 and 1.0 are one choice
                raise TuneSpaceError(f"{SPACE_NAME}[{name!r}] repeats a choice: {list(choices)}")
            knobs.append(knob)
        if raw_constraints is None:
            raw_constraints = {}
        if not isinstance(raw_constraints, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                            for k, v in raw_constraints.items()):
            raise TuneSpaceError(f"{CONSTRAINTS_NAME} must be a dict of why -> expression (both strings)")
        names = {k.name for k in knobs}
        return cls(tuple(knobs), tuple(Constraint.parse(w, e, names) for w, e in raw_constraints.items()))

    def restrict(self, names: set[str]) -> tuple[SearchSpace, list[Constraint]]:
        """The space over only these knobs, and the constraints dropped because they name others."""
        kept = tuple(c for c in self.constraints if c.names <= names)
        dropped = [c for c in self.constraints if not c.names <= names]
        return SearchSpace(tuple(k for k in self.knobs if k.name in names), kept), dropped

    # -- configurations ------------------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    @property
    def raw_size(self) -> int:
        """Configurations before the constraints: the product of the choice counts."""
        return math.prod(len(k.choices) for k in self.knobs)

    def key(self, config: Config) -> Key:
        """The configuration as choice indices (ValueError when a value is not a choice, KeyError when a knob
        is missing)."""
        return tuple(k.index(config[k.name]) for k in self.knobs)

    def contains(self, config: Config) -> bool:
        try:
            self.key(config)
        except (KeyError, ValueError):
            return False
        return True

    def config(self, key: Key) -> Config:
        return {k.name: k.choices[i] for k, i in zip(self.knobs, key)}

    def violated(self, config: Config) -> list[Constraint]:
        return [c for c in self.constraints if not c.holds(config)]

    def valid(self, config: Config) -> bool:
        return self.contains(config) and not self.violated(config)

    # -- walking the valid configurations ------------------------------------------------------------

    def walk(self, order: Callable[[int, Knob], Sequence[int]] | None = None) -> Iterator[Config]:
        """Every valid configuration, depth first over the knobs in declared order, each knob's choices in
        `order(depth, knob)` (default: as declared). A constraint is checked as soon as the knobs it names
        are set, so a ruled-out prefix is never expanded."""
        checks: list[list[Constraint]] = [[] for _ in self.knobs]
        depth_of = {k.name: i for i, k in enumerate(self.knobs)}
        for c in self.constraints:
            checks[max((depth_of[n] for n in c.names), default=0)].append(c)
        config: Config = {}
        ordering = order or (lambda depth, knob: range(len(knob.choices)))

        def descend(depth: int) -> Iterator[Config]:
            knob = self.knobs[depth]
            for i in ordering(depth, knob):
                config[knob.name] = knob.choices[i]
                if all(c.holds(config) for c in checks[depth]):
                    if depth + 1 == len(self.knobs):
                        yield dict(config)
                    else:
                        yield from descend(depth + 1)
            config.pop(knob.name, None)

        if self.knobs:
            yield from descend(0)

    def count(self, limit: int = 1_000_000) -> tuple[int, bool]:
        """(valid configurations, True when that is all of them; False when counting stopped at `limit`)."""
        n = 0
        for _ in self.walk():
            n += 1
            if n >= limit:
                return n, False
        return n, True

    def nearest(self, target: Config, free: Callable[[Config], bool]) -> Config | None:
        """The valid configuration for which `free` holds that keeps the most of `target`'s leading knobs: each
        knob tries target's choice first, then the others by distance from it. None only when no valid
        configuration is free, which the walk over the whole space then proves."""
        wanted = []
        for knob in self.knobs:
            try:
                wanted.append(knob.index(target.get(knob.name)))
            except ValueError:
                wanted.append(0)

        def order(depth: int, knob: Knob) -> list[int]:
            w = wanted[depth]
            return sorted(range(len(knob.choices)), key=lambda i: (abs(i - w), i))

        return next((c for c in self.walk(order) if free(c)), None)

    def sample(self, rng: random.Random) -> Config:
        """A configuration drawn uniformly from the raw product (constraints not applied): for tests and
        for measuring how much the constraints rule out."""
        return {k.name: rng.choice(k.choices) for k in self.knobs}
