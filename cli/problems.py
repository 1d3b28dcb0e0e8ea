"""`marathon problems`: the problem suite, as the kernels/ registry describes it, worded as the MCP tool words it."""

from __future__ import annotations

import click

from cli.group import Command
from cli.output import json_option
from cli.pretty import problems_view, show
from server import summaries


@click.command("problems", cls=Command)
@json_option("machine-readable output: a list of problems")
def problems(as_json: bool) -> int:
    from kernels import list_problems  # the suite imports torch

    show([p.describe() for p in list_problems()], as_json, summaries.problems_text, problems_view)
    return 0
