"""`marathon`: the one console script. Every subcommand's --help is its manual.

COMMANDS is the registry: each command's name, where it lives and its one-line help. The group loads a
command's module only when that command runs or its --help is shown (cli.group), so `marathon --help`
is instant; heavy imports (torch, mcp) happen inside the command that needs them. JSON output (--json)
is a public schema, kept stable and tested; human output goes to stdout, progress to stderr.

Exit codes: 0 done, 1 the job ran and failed (a candidate that does not compile, a run that failed),
2 the caller's to fix (bad usage, an unknown problem or shape, a file that cannot be a candidate: one
line on stderr, no traceback), 130 interrupted.
"""

from __future__ import annotations

import signal
import sys

import click

from cli.group import Entry, LazyGroup

COMMANDS: dict[str, Entry] = {
    "problems": Entry("cli.problems:problems", "list the problem suite: shapes, tolerance, baselines"),
    "log": Entry("cli.log:log", "show the newest events of the event log"),
    "export": Entry("cli.log:export", "write every event of a run, with the kernel sources it names, as JSON Lines"),
    "compile": Entry("cli.jobs:compile_", "compile a candidate's kernels for Hopper (sm_90) and report resources"),
    "profile": Entry("cli.jobs:profile", "check a candidate on fresh inputs and time it against a baseline"),
    "baseline": Entry("cli.jobs:baseline",
                      "time the problem's baselines (eager and CUDA graph); cached in the log"),
    "hotspots": Entry("cli.jobs:hotspots", "where a candidate's kernels stall, per source line (Nsight Compute's "
                                           "warp-state samples; needs a GPU and ncu)"),
    "serve": Entry("cli.serve:serve", "run the MCP server: stdio (default) or streamable HTTP with a bearer token"),
    "run": Entry("cli.run:run",
                 "run the bundled agent loop on a problem until the goal is met or the budget is spent"),
    "resume": Entry("cli.run:resume",
                    "continue a stopped run from its last committed event (after a kill, crash or Ctrl-C)"),
    "status": Entry("cli.status:status",
                    "the state of a run: running, interrupted, finished or failed; steps, its best, budget"),
    "report": Entry("cli.report:report", "a run's report, in a folder of its own: report.md (goal, best, every "
                                         "attempt numbered, notes, spend) and progress.png (speedup over time "
                                         "and steps) when anything was timed"),
}


@click.group(cls=LazyGroup, entries=COMMANDS, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]},
             help="kernel-marathon: compile, check, time and iterate on Triton kernels for Hopper GPUs. "
                  "State lives in $MARATHON_HOME (default ~/.local/state/kernel-marathon).")
@click.pass_context
def marathon(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:  # `marathon` alone: the help, and exit 2 (no command given)
        click.echo(ctx.get_help())
        ctx.exit(2)


def _usage_error(exc: click.UsageError) -> int:
    """As argparse said it: the usage line, then "PROG: error: MESSAGE"; exit 2."""
    prog = exc.ctx.command_path if exc.ctx is not None else "marathon"
    if exc.ctx is not None:
        print(exc.ctx.get_usage(), file=sys.stderr)
    print(f"{prog}: error: {exc.format_message()}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE"):  # `marathon log --json | head` ends quietly, as a Unix tool does
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        with marathon.make_context("marathon", args) as ctx:
            return int(marathon.invoke(ctx) or 0)
    except click.exceptions.Exit as exc:  # --help, and commands that end early with a code
        return int(exc.exit_code)
    except click.UsageError as exc:
        return _usage_error(exc)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        print("marathon: interrupted", file=sys.stderr)
        return 130
    except KeyError as exc:  # an unknown name the caller gave (a problem, a shape, a run)
        print(f"marathon: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
