"""`marathon problems`: the problem suite, as the kernels/ registry describes it."""

from __future__ import annotations

from typing import Any

import click

from cli.group import Command
from cli.output import emit, json_option


def _human(items: list[dict[str, Any]]) -> str:
    lines = []
    for d in items:
        lines.append(f"{d['name']}: {d['summary']}")
        for shape, dims in d["shapes"].items():
            dims_s = ", ".join(f"{k}={v}" for k, v in dims.items())
            lines.append(f"    {shape:<12} {dims_s}")
        lines.append(f"    baselines: {', '.join(b['name'] for b in d['baselines']) or '-'}")
    return "\n".join(lines)


@click.command("problems", cls=Command)
@json_option("machine-readable output: a list of problems")
def problems(as_json: bool) -> int:
    from kernels import list_problems  # the suite imports torch

    emit([p.describe() for p in list_problems()], as_json, _human)
    return 0
