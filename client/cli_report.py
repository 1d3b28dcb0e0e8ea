"""`marathon status` and `marathon report`: a run read back from the event log.

Registered with client.cli on import, after client.cli_run, so these are the `status` and `report`
commands whatever that module registers under the same names. The text of `status` is
client.runs.format_status and its JSON client.runs.status_data; the report is client.report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from client import cli


def _fail(message: str, code: int = 2) -> int:
    print(f"marathon: {message}", file=sys.stderr)
    return code


# -- status -------------------------------------------------------------------------------------------

def _status_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="?", help="run id (default: the newest run)")
    p.add_argument("--json", action="store_true",
                   help="machine-readable: run_id, state (running, interrupted, finished, failed), steps, best "
                        "(this run's own), log_best (any run's), ...")


@cli.command("status", "the state of a run: running, interrupted, finished or failed; steps, its best, budget")(
    _status_args)
def cmd_status(args: argparse.Namespace) -> int:
    from client.runs import format_status, latest_run, status_data
    from state import EventLog

    with EventLog() as log:
        run_id = args.run or latest_run(log)
        if run_id is None:
            return _fail("no runs yet (start one with `marathon run --problem NAME`)", 1)
        try:
            data = status_data(log, run_id)
        except KeyError as exc:
            return _fail(str(exc.args[0]))
    cli.emit(data, args.json, format_status)
    return 0


# -- report -------------------------------------------------------------------------------------------

def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="?", help="run id (default: the newest run)")
    p.add_argument("--out", metavar="DIR",
                   help="where reports go: the report is written to DIR/RUN/ (DIR itself when it is named after "
                        "the run); default $MARATHON_HOME/reports. Another run's report is never replaced")


@cli.command("report", "a run's report, in a folder of its own: report.md (goal, best, every attempt numbered, "
                       "notes, spend) and progress.png (speedup over time and steps) when anything was timed")(
    _report_args)
def cmd_report(args: argparse.Namespace) -> int:
    from client.report import write
    from client.report_dir import FolderTaken
    from client.runs import latest_run
    from state import EventLog

    with EventLog() as log:
        run_id = args.run or latest_run(log)
        if run_id is None:
            return _fail("no runs yet", 1)
        out = Path(args.out) if args.out else log.path.parent / "reports"
        try:
            files = write(log, run_id, out)
        except KeyError as exc:
            return _fail(str(exc.args[0]))
        except FolderTaken as exc:
            return _fail(str(exc))
    print(files.markdown)
    if files.plot is not None:
        print(files.plot)
    else:
        print(f"marathon: no plot: {files.no_plot}", file=sys.stderr)
    return 0
