"""`marathon report`: a run's report (client.report), written to a folder of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cli.group import Command
from cli.output import fail


@click.command("report", cls=Command, epilog="RUN: the run id (default: the newest run)")
@click.argument("run", metavar="[RUN]", required=False)
@click.option("--out", metavar="DIR",
              help="where reports go: the report is written to DIR/RUN/ (DIR itself when it is named after the run); "
                   "default $MARATHON_HOME/reports. Another run's report is never replaced")
def report(run: str | None, out: str | None) -> int:
    from client.report import write
    from client.report_dir import FolderTaken
    from client.run_status import latest_run
    from state import EventLog

    with EventLog() as log:
        run_id = run or latest_run(log)
        if run_id is None:
            return fail("no runs yet", 1)
        folder = Path(out) if out else log.path.parent / "reports"
        try:
            files = write(log, run_id, folder)
        except KeyError as exc:
            return fail(str(exc.args[0]))
        except FolderTaken as exc:
            return fail(str(exc))
    print(files.markdown)
    if files.plot is not None:
        print(files.plot)
    else:
        print(f"marathon: no plot: {files.no_plot}", file=sys.stderr)
    return 0
