"""`marathon problems`: the problem suite, as the kernels/ registry describes it, worded as the MCP tool words it."""

from __future__ import annotations

import click

from cli.group import Command
from cli.output import emit, json_option
from server import summaries


@click.command("problems", cls=Command)
@json_option("machine-readable output: a list of problems")
def problems(as_json: bool) -> int:
    from kernels import list_problems  # the suite imports torch

    emit([p.describe() for p in list_problems()], as_json, summaries.problems_text)
    return 0
