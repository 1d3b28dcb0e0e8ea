"""`marathon status`: the state of a run, read back from the event log.

The text is client.run_status.format_status (drawn by cli.pretty.status_view on a terminal) and the
JSON client.run_status.status_data (a public schema: run_id, state, steps, best, log_best, ...).
"""

from __future__ import annotations

import click

from cli.group import Command
from cli.output import fail, json_option
from cli.pretty import show, status_view


@click.command("status", cls=Command, epilog="RUN: the run id (default: the newest run)")
@click.argument("run", metavar="[RUN]", required=False)
@json_option("machine-readable: run_id, state (running, interrupted, finished, failed), steps, best (this run's "
             "own), log_best (any run's), ...")
def status(run: str | None, as_json: bool) -> int:
    from client.run_status import format_status, latest_run, status_data
    from state import EventLog

    with EventLog() as log:
        run_id = run or latest_run(log)
        if run_id is None:
            return fail("no runs yet (start one with `marathon run --problem NAME`)", 1)
        try:
            data = status_data(log, run_id)
        except KeyError as exc:
            return fail(str(exc.args[0]))
    show(data, as_json, format_status, status_view)
    return 0
