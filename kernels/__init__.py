"""The problem suite: one folder per problem, each with `problem.py` (PROBLEM) and `starter.py`."""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path

from kernels.spec import Problem

PROBLEMS_DIR = Path(__file__).resolve().parent


def problem_names() -> list[str]:
    """Every folder here with a problem.py, sorted, so new problems need no registration."""
    return sorted(p.parent.name for p in PROBLEMS_DIR.glob("*/problem.py"))


@cache
def get_problem(name: str) -> Problem:
    if name not in problem_names():
        raise KeyError(f"unknown problem {name!r} (known: {', '.join(problem_names())})")
    module = importlib.import_module(f"kernels.{name}.problem")
    problem = module.PROBLEM
    if not isinstance(problem, Problem):
        raise TypeError(f"kernels/{name}/problem.py: PROBLEM is not a kernels.spec.Problem")
    return problem


def list_problems() -> list[Problem]:
    return [get_problem(n) for n in problem_names()]


def starter_path(name: str) -> Path:
    return PROBLEMS_DIR / name / "starter.py"


def solution_path(name: str) -> Path | None:
    path = PROBLEMS_DIR / name / "solution.py"
    return path if path.exists() else None
