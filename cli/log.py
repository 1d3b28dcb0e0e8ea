"""`marathon log` and `marathon export`: the event log read back, newest events or one run whole."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from cli.group import Command
from cli.output import fail, json_option
from cli.pretty import log_view, show


def _human(items: list[dict[str, Any]]) -> str:
    if not items:
        return "(no events)"
    lines = []
    for e in reversed(items):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["ts"]))
        payload = json.dumps(e["payload"], default=str)
        if len(payload) > 100:
            payload = payload[:97] + "..."
        lines.append(f"{e['id']:>6} {when} {e['run_id'] or '-':<14} {e['kind']:<12} {payload}")
    return "\n".join(lines)


@click.command("log", cls=Command)
@click.option("--run", metavar="ID", help="only events of this run")
@click.option("--kind", multiple=True, help="only events of this kind (repeatable)")
@click.option("--limit", type=int, default=20, metavar="N", help="newest N events (default 20)")
@json_option("machine-readable output: a list of events")
def log(run: str | None, kind: tuple[str, ...], limit: int, as_json: bool) -> int:
    from state import EventLog

    with EventLog() as events_log:
        events = events_log.events(run_id=run, kinds=list(kind) or None, limit=limit, newest_first=True)
        data = [e.as_dict() for e in events]
    show(data, as_json, _human, log_view)
    return 0


@click.command("export", cls=Command, epilog="RUN: the run id (see `marathon status` or `marathon log`)")
@click.argument("run", metavar="RUN")
@click.option("--out", metavar="FILE", help="write here instead of standard output")
def export(run: str, out: str | None) -> int:
    from state import EventLog

    with EventLog() as events_log:
        if not events_log.events(run_id=run, limit=1):
            return fail(f"no events for run {run!r}")
        if out:
            with open(out, "w", encoding="utf-8") as fp:
                n = events_log.export_jsonl(run, fp)
            print(f"{n} lines written to {out}", file=sys.stderr)
        else:
            events_log.export_jsonl(run, sys.stdout)
    return 0
