"""The problem suite's own kernels (kernels/<problem>/starter.py, solution.py) as text.

The tuner reads them for their declared spaces when the kernel it tunes declares none (a best attempt an
agent wrote), and to start from the solution when asked to. Read as files found beside the installed
`kernels` package, never imported: the client does not depend on the problem suite (DESIGN.md section 2),
and the MCP server serves only the starter (`problem://NAME/starter`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

KINDS = ("solution", "starter")


def kernel_text(problem: str, kind: str) -> str | None:
    """The text of the problem's `kind` kernel ("solution" or "starter"), or None where there is none."""
    if kind not in KINDS or not problem.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec("kernels")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder) / problem / f"{kind}.py"
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return None
