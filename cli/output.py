"""What every command prints the same way: --json or human output, progress lines, one-line errors.

JSON output (--json) is a public schema, kept stable and tested: plain `json.dumps`, indented, to
stdout; a job's report is the MCP tool's structured result, under the schema tools/list publishes.
Human output goes to stdout too, progress and errors to stderr, an error as one line ("marathon: ...")
with no traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from server.models import Report


def emit(data: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    else:
        print(human(data))


def emit_result(report: Report, result: type[Report], as_json: bool, human: Callable[[dict[str, Any]], str]) -> None:
    """A job's report: with --json, as the MCP tool's structured result of the same call (the schema `result`,
    a server.models class, publishes), plus the private keys the MCP answer leaves out (our tracebacks)."""
    fields = report.as_dict()
    if not as_json:
        print(human(fields))
        return
    from server.models import PRIVATE_KEYS, published

    out = published(result, report).model_dump(mode="json", by_alias=True)
    out.update({k: fields[k] for k in PRIVATE_KEYS if k in fields})
    print(json.dumps(out, indent=2, default=str))


def json_option(help_text: str = "machine-readable output") -> Callable[[Any], Any]:
    """`--json` (the parameter is `as_json`)."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def stderr_progress(message: dict[str, Any]) -> None:
    done, total = message.get("done"), message.get("total")
    frac = f" {done}/{total}" if done is not None and total else ""
    print(f"  ... {message.get('stage', '')}{frac}", file=sys.stderr, flush=True)


def progress_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def fail(message: str, code: int = 2) -> int:
    """Say why on one line of stderr; the exit code to return (2: the caller's to fix)."""
    print(f"marathon: {message}", file=sys.stderr)
    return code


def refuse(message: str, code: int = 2) -> NoReturn:
    """`fail`, from anywhere below a command: the command ends with `code`."""
    raise click.exceptions.Exit(fail(message, code))
