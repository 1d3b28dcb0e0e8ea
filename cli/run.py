"""`marathon run` and `marathon resume`: the bundled agent loop, started or continued in this process.

The loop (client.loop) reaches the engine only through MCP: it spawns `marathon serve` over stdio, or
connects to --server over HTTP. What is made here: the policy that drives (the tuner, or a model
provider by name), the server link, the loop's options; then the run is driven under its lock until it
ends, and its status (and, with --report, its report) printed. The heavy imports (mcp, matplotlib,
torch through the problem suite) happen inside the command that needs them.
"""

from __future__ import annotations

import calendar
import functools
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from cli.group import Command
from cli.output import fail, json_option, progress_line

POLICY_ENV = "MARATHON_POLICY"
MODEL_ENV = "MARATHON_MODEL"


# The option of `marathon resume` that raises each limit of RunState.budget_left.
_LIMIT_OPTIONS = {"steps": "--max-steps", "hours": "--hours", "tokens": "--max-tokens", "cost_usd": "--max-cost",
                  "deadline_s": "--deadline"}


def _deadline(text: str | None) -> float | None:
    """An ISO date-time in UTC ("2026-12-02T06:00") or "+H" hours from now."""
    if not text:
        return None
    if text.startswith("+"):
        return time.time() + float(text[1:]) * 3600
    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return float(calendar.timegm(time.strptime(text.rstrip("Z"), fmt)))
        except ValueError:
            continue
    raise SystemExit(f"marathon: cannot read --deadline {text!r} (use 2026-12-02T06:00 in UTC, or +H hours)")


# -- making the policy and the server link --------------------------------------------------------------

def make_policy(name: str, model: str | None, options: dict[str, Any], log: Any = None) -> Any:
    """The policy called `name`: the tuner here (reading its trials from `log`), model providers through
    client.providers."""
    if name == "tuner":
        from client.tuner import TunerPolicy

        try:
            return TunerPolicy(model, log=log, **options)
        except ValueError as exc:
            raise SystemExit(f"marathon: {exc}") from None
    try:
        from client.providers import make_provider
        from client.providers.config import ProviderConfigError
    except ImportError as exc:
        raise SystemExit(f"marathon: policy {name!r} needs the model providers (client.providers): {exc}") from None
    try:
        return make_provider(name, model, **options)
    except ProviderConfigError as exc:
        raise SystemExit(f"marathon: {exc}") from None


def server_spec(described: dict[str, Any], run_id: str, home: Path) -> Any:
    from client.mcp_link import ServerSpec, server_env

    if described.get("kind") == "http":
        return ServerSpec(url=described["url"], token_env=described.get("token_env") or "MARATHON_TOKEN")
    command = described.get("command")
    if isinstance(command, list) and command[1:] == ["-m", "client.cli", "serve"]:
        command = None  # the default of runs started before `marathon` moved to cli/: today's default
    return ServerSpec(command=command, env=server_env(run_id, home), errlog=home / "logs" / f"serve-{run_id}.stderr")


def loop_options(saved: dict[str, Any] | None = None, args: Any = None) -> Any:
    from client.compaction import CompactionConfig
    from client.loop import LoopOptions

    saved = saved or {}
    comp = dict(saved.get("compaction") or {})
    window = getattr(args, "context_window", None) or comp.get("context_window") or 200_000
    threshold = getattr(args, "compact_at", None) or (comp.get("threshold") if saved else None)
    options = LoopOptions(compaction=CompactionConfig(context_window=int(window),
                                                      threshold=int(threshold) if threshold else None))
    if saved.get("call_timeouts"):
        options.call_timeouts = {str(k): float(v) for k, v in saved["call_timeouts"].items()}
    if saved.get("default_timeout"):
        options.default_timeout = float(saved["default_timeout"])
    timeout = getattr(args, "call_timeout", None)
    if timeout:
        options.call_timeouts = dict.fromkeys(("profile", "baseline", "compile", "hotspots"), float(timeout))
    return options


async def drive(log: Any, spec: Any, policy: Any, run_id: str, options: Any, *, resume: bool,
                quiet: bool, extend: dict[str, Any] | None = None) -> Any:
    """Connect to the server and run the loop until the run ends; the connection is closed after."""
    from client.loop import Loop
    from client.mcp_link import Link

    link = Link(spec, run_id=run_id)
    try:
        await link.ensure()
        loop = Loop(log, link, policy, run_id, options=options, progress=None if quiet else progress_line)
        if resume:
            loop.mark_resumed(extend=extend)
        return await loop.run()
    finally:
        await link.close()


def _execute(log: Any, run_id: str, spec: Any, policy: Any, options: Any, args: Any, resume: bool,
             extend: dict[str, Any] | None = None) -> int:
    import anyio

    from client.mcp_link import LinkDown
    from client.run_status import RunBusy, RunLock

    try:
        lock = RunLock(log.path, run_id).acquire()
    except RunBusy as exc:
        return fail(f"run {run_id}: {exc}", 1)
    try:
        if not args.quiet:
            progress_line(f"run {run_id}: {'resuming' if resume else 'starting'} ({policy.name}); "
                          f"`marathon status {run_id}` shows it, `marathon resume {run_id}` continues it after a stop")
        try:
            end = anyio.run(functools.partial(drive, log, spec, policy, run_id, options, resume=resume,
                                              quiet=args.quiet, extend=extend))
        except KeyboardInterrupt:
            progress_line(f"run {run_id}: interrupted; `marathon resume {run_id}` continues it")
            return 130
        except LinkDown as exc:
            progress_line(f"run {run_id}: stopped, the server cannot be reached ({exc}); "
                          f"`marathon resume {run_id}` continues it")
            return 1
        except Exception as exc:
            log.append("run.end", {"state": "failed", "reason": f"{type(exc).__name__}: {exc}"[:2000]}, run_id=run_id)
            raise
    finally:
        lock.release()
    _summary(log, run_id, args)
    return 1 if end.state == "failed" else 0


def _summary(log: Any, run_id: str, args: Any) -> None:
    from client.run_status import format_status, status_data

    data = status_data(log, run_id)
    files = None
    if getattr(args, "report", None):
        from client.report import write
        from client.report_dir import FolderTaken

        out = log.path.parent / "reports" if args.report == "-" else Path(args.report)
        try:
            files = write(log, run_id, out)
        except FolderTaken as exc:
            progress_line(f"marathon: report not written: {exc}")
    if getattr(args, "as_json", False):
        if files is not None:
            data["report"] = str(files.folder)
        print(json.dumps(data, indent=2, default=str))
        return
    print(format_status(data))
    if files is not None:
        print(f"report: {files.markdown}" + (f" and {files.plot}" if files.plot else f" ({files.no_plot})"))
    else:
        print(f"report: marathon report {run_id}")


# -- run ----------------------------------------------------------------------------------------------

REPORT_HELP = ("write the report (PNG + Markdown) when the run ends, to DIR/RUN/ (default "
               "$MARATHON_HOME/reports/RUN/)")


def _report_option(help_text: str) -> Any:
    """--report [DIR]: alone, the default folder ("-")."""
    return click.option("--report", metavar="[DIR]", is_flag=False, flag_value="-", default=None, help=help_text)


@click.command("run", cls=Command)
@click.option("--problem", required=True, metavar="NAME", help="problem name (see `marathon problems`)")
@click.option("--shape", default="bench", metavar="SHAPE", help="shape to optimise (default bench)")
@click.option("--policy", default=lambda: os.environ.get(POLICY_ENV, "tuner"),
              help=f"who drives: tuner (no model, the default), anthropic, openai, ... (default ${POLICY_ENV} or "
                   "tuner)")
@click.option("--model", default=lambda: os.environ.get(MODEL_ENV), help=f"model name (default ${MODEL_ENV})")
@click.option("--target", type=float, metavar="X", help="stop when the measured speedup reaches X")
@click.option("--target-us", type=float, metavar="US", help="stop when the measured median time reaches US")
@click.option("--hours", type=float, metavar="H", help="budget: hours of active wall time")
@click.option("--max-steps", type=int, metavar="N",
              help="budget: tool calls (the run ends at exactly N, unless the goal is met first or the tuner has "
                   "tried every valid configuration of its space, which `status` then says)")
@click.option("--max-tokens", type=int, metavar="N", help="budget: model tokens, compaction included")
@click.option("--max-cost", type=float, metavar="USD", help="budget: model cost in dollars")
@click.option("--deadline", help="stop at this UTC time (2026-12-02T06:00) or after +H hours, whatever else")
@click.option("--instructions", default="", help="extra words for the goal, kept verbatim in the first message")
@click.option("--tune-from", type=click.Choice(["best", "starter", "solution"]), default="best",
              help="tuner: the kernel to search from: the best in the log, else the starter (best, the default), "
                   "the problem's starter, or the problem's solution")
@click.option("--seed", type=int, default=0, help="tuner: the search's seed (default 0); a resumed run keeps it")
@click.option("--remeasure", type=click.IntRange(0, 2), default=1, metavar="{0,1,2}",
              help="tuner: extra profiles of a configuration faster than the best before it may lead (default 1)")
@click.option("--server", metavar="URL", help="an MCP server over HTTP (default: spawn `marathon serve` over stdio)")
@click.option("--token-env", default="MARATHON_TOKEN", metavar="VAR",
              help="environment variable holding the HTTP bearer token (default MARATHON_TOKEN)")
@click.option("--context-window", type=int, metavar="TOKENS", help="the model's window (default 200000)")
@click.option("--compact-at", type=int, metavar="TOKENS",
              help="compact when the context passes this (default 45% of the window)")
@click.option("--call-timeout", type=float, metavar="S", help="per-call timeout of compile/profile/baseline")
@click.option("--run-id", metavar="ID", help="name the run (default PROBLEM-DATE-TIME-xxxx)")
@_report_option(REPORT_HELP)
@click.option("--quiet", is_flag=True, help="no progress lines on stderr")
@json_option("print the final status as JSON")
def run(**params: Any) -> int:
    from client.goal import Budget, Goal
    from client.loop import start_run
    from client.run_status import new_run_id
    from server.service import Service, UnknownInput
    from state import EventLog

    args = SimpleNamespace(**params)
    try:
        Service.resolve(args.problem, args.shape)
    except UnknownInput as exc:
        return fail(str(exc))
    if args.max_steps is not None and args.max_steps < 1:
        return fail("--max-steps must be at least 1")
    goal = Goal(problem=args.problem, shape=args.shape, target_speedup=args.target, target_us=args.target_us,
                deadline=_deadline(args.deadline), instructions=args.instructions,
                budget=Budget(hours=args.hours, steps=args.max_steps, tokens=args.max_tokens, cost_usd=args.max_cost))
    policy_options = ({"seed": args.seed, "start": args.tune_from, "remeasure": args.remeasure}
                      if args.policy == "tuner" else {})
    log = EventLog()
    policy = make_policy(args.policy, args.model, policy_options, log)
    home = log.path.parent
    run_id = args.run_id or new_run_id(args.problem)
    described = ({"kind": "http", "url": args.server, "token_env": args.token_env} if args.server
                 else {"kind": "stdio", "command": None})
    spec = server_spec(described, run_id, home)
    if args.context_window is None and isinstance(getattr(policy, "context_window", None), int):
        args.context_window = policy.context_window  # the provider knows its model's window
    options = loop_options(None, args)
    if log.events(run_id=run_id, kinds=["run.start"], limit=1):
        return fail(f"run {run_id} exists already; `marathon resume {run_id}` continues it")
    start_run(log, run_id, goal, policy=args.policy, model=args.model, policy_options=policy_options,
              server=spec.describe(), options=options)
    return _execute(log, run_id, spec, policy, options, args, resume=False)


# -- resume -------------------------------------------------------------------------------------------

@click.command("resume", cls=Command, epilog="RUN: the run id (see `marathon status`). The limits are the run's new "
               "totals, not additions; a run that ended because a limit was reached continues under new ones.")
@click.argument("run", metavar="RUN")
@click.option("--max-steps", type=int, metavar="N", help="new budget: tool calls in all")
@click.option("--hours", type=float, metavar="H", help="new budget: hours of active wall time in all")
@click.option("--max-tokens", type=int, metavar="N", help="new budget: model tokens in all")
@click.option("--max-cost", type=float, metavar="USD", help="new budget: model cost in dollars in all")
@click.option("--deadline", metavar="DEADLINE", help="new deadline: a UTC time (2026-12-02T06:00) or +H hours")
@_report_option("write the report when the run ends, to DIR/RUN/ (default $MARATHON_HOME/reports/RUN/)")
@click.option("--quiet", is_flag=True, help="no progress lines on stderr")
@json_option("print the final status as JSON")
def resume(run: str, max_steps: int | None, hours: float | None, max_tokens: int | None, max_cost: float | None,
           deadline: str | None, report: str | None, quiet: bool, as_json: bool) -> int:
    from client.run_projection import RunState
    from client.run_status import is_locked
    from state import EventLog

    args = SimpleNamespace(report=report, quiet=quiet, as_json=as_json)
    budget = {k: v for k, v in {"steps": max_steps, "hours": hours, "tokens": max_tokens,
                                "cost_usd": max_cost}.items() if v is not None}
    if any(v <= 0 for v in budget.values()):
        return fail("a new limit must be positive")
    extend: dict[str, Any] = {**({"budget": budget} if budget else {}),
                              **({"deadline": _deadline(deadline)} if deadline else {})}
    log = EventLog()
    try:
        state = RunState.load(log, run)
    except KeyError as exc:
        return fail(str(exc.args[0]))
    ended = state.ended.get("state") if state.ended is not None else None
    if ended is not None and ended != "failed" and not (ended == "budget" and extend):
        more = (" (it ended by its budget: name new limits, e.g. --max-steps N, and it continues)"
                if ended == "budget" else "")
        print(f"run {run} has finished ({ended}: {state.ended.get('reason') if state.ended else ''}); "
              f"nothing to resume{more}")
        return 0
    if extend and state.goal is not None:
        state.goal = state.goal.extended(extend)
        spent = state.budget_spent()
        if spent is not None:
            options = [_LIMIT_OPTIONS[name] for name, left in state.budget_left().items()
                       if left is not None and left <= 0]
            hint = f": raise it too ({', '.join(options)})" if options else ""
            return fail(f"run {run}: under the new limits {spent} already ({state.steps_started} steps taken){hint}")
    if is_locked(log.path, run):
        return fail(f"run {run} is running in another process", 1)
    start = state.start
    policy = make_policy(str(start.get("policy") or "tuner"), start.get("model"),
                         dict(start.get("policy_options") or {}), log)
    spec = server_spec(dict(start.get("server") or {}), run, log.path.parent)
    options = loop_options(dict(start.get("options") or {}))
    return _execute(log, run, spec, policy, options, args, resume=True, extend=extend or None)
