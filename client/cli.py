"""`marathon`: the one console script. Every subcommand's --help is its manual.

Subcommands register themselves in COMMANDS; heavy imports (torch, mcp) happen inside the command
that needs them, so `marathon --help` is instant. JSON output (--json) is a public schema, kept
stable and tested; human output goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from server import text

Command = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[Command, Callable[[argparse.ArgumentParser], None], str]] = {}


def command(name: str, help_text: str) -> Callable[[Callable[[argparse.ArgumentParser], None]],
                                                   Callable[[Command], Command]]:
    def with_args(add_args: Callable[[argparse.ArgumentParser], None]) -> Callable[[Command], Command]:
        def register(fn: Command) -> Command:
            COMMANDS[name] = (fn, add_args, help_text)
            return fn
        return register
    return with_args


def emit(data: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    else:
        print(human(data))


def stderr_progress(message: dict[str, Any]) -> None:
    done, total = message.get("done"), message.get("total")
    frac = f" {done}/{total}" if done is not None and total else ""
    print(f"  ... {message.get('stage', '')}{frac}", file=sys.stderr, flush=True)


def _read_source(path: str, problem: str | None = None) -> str:
    """The candidate file's text, or one line saying why it cannot be one (exit 2, nothing logged)."""
    from server.service import MAX_SOURCE_BYTES

    p = Path(path)
    about = f" (problem {problem})" if problem else ""

    def refuse(why: str) -> NoReturn:
        print(f"marathon: {path}{about}: {why}", file=sys.stderr)
        raise SystemExit(2)

    if p.is_dir():
        refuse("is a directory; give the candidate's .py file")
    if not p.exists():
        refuse("no such file")
    try:
        size = p.stat().st_size
        if size > MAX_SOURCE_BYTES:
            refuse(f"is {size:,} bytes; a candidate file may hold at most {MAX_SOURCE_BYTES:,}")
        data = p.read_bytes()
    except OSError as exc:
        refuse(f"cannot be read: {exc.strerror or exc}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        refuse(f"is not UTF-8 text (byte {exc.start}); a candidate is a Python source file")
    if "\x00" in text:
        refuse("holds NUL bytes; a candidate is a Python source file")
    return text


def _service() -> Any:
    from server.service import Service

    return Service()


# -- problems -----------------------------------------------------------------------------------------

def _problems_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output: a list of problems")


@command("problems", "list the problem suite: shapes, tolerance, baselines")(_problems_args)
def cmd_problems(args: argparse.Namespace) -> int:
    from kernels import list_problems

    data = [p.describe() for p in list_problems()]

    def human(items: list[dict[str, Any]]) -> str:
        lines = []
        for d in items:
            lines.append(f"{d['name']}: {d['summary']}")
            for shape, dims in d["shapes"].items():
                dims_s = ", ".join(f"{k}={v}" for k, v in dims.items())
                lines.append(f"    {shape:<12} {dims_s}")
            lines.append(f"    baselines: {', '.join(b['name'] for b in d['baselines']) or '-'}")
        return "\n".join(lines)

    emit(data, args.json, human)
    return 0


# -- log ----------------------------------------------------------------------------------------------

def _log_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", metavar="ID", help="only events of this run")
    p.add_argument("--kind", action="append", help="only events of this kind (repeatable)")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="newest N events (default 20)")
    p.add_argument("--json", action="store_true", help="machine-readable output: a list of events")


@command("log", "show the newest events of the event log")(_log_args)
def cmd_log(args: argparse.Namespace) -> int:
    from state import EventLog

    with EventLog() as log:
        events = log.events(run_id=args.run, kinds=args.kind, limit=args.limit, newest_first=True)
        data = [e.as_dict() for e in events]

    def human(items: list[dict[str, Any]]) -> str:
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

    emit(data, args.json, human)
    return 0


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run id (see `marathon status` or `marathon log`)")
    p.add_argument("--out", metavar="FILE", help="write here instead of standard output")


@command("export", "write every event of a run, with the kernel sources it names, as JSON Lines")(_export_args)
def cmd_export(args: argparse.Namespace) -> int:
    from state import EventLog

    with EventLog() as log:
        if not log.events(run_id=args.run, limit=1):
            print(f"marathon: no events for run {args.run!r}", file=sys.stderr)
            return 2
        if args.out:
            with open(args.out, "w", encoding="utf-8") as fp:
                n = log.export_jsonl(args.run, fp)
            print(f"{n} lines written to {args.out}", file=sys.stderr)
        else:
            log.export_jsonl(args.run, sys.stdout)
    return 0


# -- compile / profile / baseline -------------------------------------------------------------------

def _compile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="candidate source file defining entry(*inputs)")
    p.add_argument("--problem", required=True, help="problem name (see `marathon problems`)")
    p.add_argument("--shape", default="bench", help="shape whose launches are compiled (default bench)")
    p.add_argument("--asm", action="store_true", help="include PTX and SASS of every kernel")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="seconds before the compile is stopped (default: MARATHON_JOB_TIMEOUT, else 180 s to "
                        "capture the launches and 300 s to compile them)")
    p.add_argument("--lines", action="store_true",
                   help="per kernel, its instructions by source line: shared memory, barriers, shuffles, MMAs, "
                        "global and spill traffic")
    p.add_argument("--json", action="store_true", help="machine-readable output")


@command("compile", "compile a candidate's kernels for Hopper (sm_90) and report resources")(_compile_args)
def cmd_compile(args: argparse.Namespace) -> int:
    source = _read_source(args.file, args.problem)
    svc = _service()
    try:
        report = svc.compile(args.problem, source, args.shape, want_asm=args.asm, want_lines=args.lines,
                             client={"name": "marathon-cli"}, timeout=args.timeout,
                             progress=None if args.json else stderr_progress)
    finally:
        svc.close()
    emit(report, args.json, text.compile_text)
    return 0 if report["ok"] else 1


def _profile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="candidate source file defining entry(*inputs)")
    p.add_argument("--problem", required=True, help="problem name (see `marathon problems`)")
    p.add_argument("--shape", default="bench", help="shape to check and time (default bench)")
    p.add_argument("--graph", choices=["auto", "on", "off"], default="auto",
                   help="time CUDA-graph replays (auto: when a call takes under 200 us)")
    p.add_argument("--baseline", help="baseline to time against (default: the problem's first available)")
    # No `choices`: the service checks the value, so the CLI's answer to a bad one is the MCP tool's.
    p.add_argument("--l2", default="cold", metavar="{cold,warm}",
                   help="L2 state before each timed rep, the baseline's too: cold (default) flushes it; warm does not "
                        "(warm timings are not verified and never become a best)")
    p.add_argument("--timeout", type=float, help="seconds before the job is stopped (default 600)")
    p.add_argument("--ncu", action="store_true",
                   help="also run the candidate under Nsight Compute (where ncu exists) and report its kernel time")
    p.add_argument("--json", action="store_true", help="machine-readable output")


@command("profile", "check a candidate on fresh inputs and time it against a baseline")(_profile_args)
def cmd_profile(args: argparse.Namespace) -> int:
    source = _read_source(args.file, args.problem)
    graph = {"auto": None, "on": True, "off": False}[args.graph]
    svc = _service()
    try:
        report = svc.profile(args.problem, source, args.shape, client={"name": "marathon-cli"},
                             progress=None if args.json else stderr_progress, graph=graph,
                             baseline=args.baseline, timeout=args.timeout, ncu=args.ncu, l2=args.l2)
    finally:
        svc.close()
    emit(report, args.json, text.profile_text)
    return 0 if report.get("ok") else 1


def _baseline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problem", required=True, help="problem name (see `marathon problems`)")
    p.add_argument("--shape", default="bench", help="shape to time (default bench)")
    p.add_argument("--refresh", action="store_true", help="measure again even if the log has this baseline")
    p.add_argument("--json", action="store_true", help="machine-readable output")


@command("baseline", "time the problem's baselines (eager and CUDA graph); cached in the log")(_baseline_args)
def cmd_baseline(args: argparse.Namespace) -> int:
    svc = _service()
    try:
        report = svc.baseline(args.problem, args.shape, refresh=args.refresh, client={"name": "marathon-cli"},
                              progress=None if args.json else stderr_progress)
    finally:
        svc.close()
    emit(report, args.json, text.baseline_text)
    return 0 if report.get("ok") else 1


def _hotspots_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="candidate source file defining entry(*inputs)")
    p.add_argument("--problem", required=True, help="problem name (see `marathon problems`)")
    p.add_argument("--shape", default="bench", help="shape to run (default bench)")
    p.add_argument("--top", type=int, default=15, help="source lines to list per kernel (default 15)")
    p.add_argument("--save", type=Path, help="keep ncu's report, its source page and the cubins in this folder")
    p.add_argument("--json", action="store_true", help="machine-readable output")


@command("hotspots", "where a candidate's kernels stall, per source line (Nsight Compute's warp-state samples; "
                     "needs a GPU and ncu)")(_hotspots_args)
def cmd_hotspots(args: argparse.Namespace) -> int:
    source = _read_source(args.file, args.problem)
    svc = _service()
    try:
        report = svc.hotspots(args.problem, source, args.shape, top=args.top, save_dir=args.save,
                              client={"name": "marathon-cli"}, progress=None if args.json else stderr_progress)
    finally:
        svc.close()
    emit(report, args.json, text.hotspots_text)
    return 0 if report.get("ok") else 1


# -- entry point --------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    _load_command_modules()
    parser = argparse.ArgumentParser(
        prog="marathon",
        description="kernel-marathon: compile, check, time and iterate on Triton kernels for Hopper GPUs. "
                    "State lives in $MARATHON_HOME (default ~/.local/state/kernel-marathon).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (fn, add_args, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
        p.set_defaults(func=fn)
    return parser


def _load_command_modules() -> None:
    """Commands that live beside their capability (serve; run and resume; status and report) register on
    import."""
    import importlib

    for module in ("server.cli_serve", "client.cli_run", "client.cli_report"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE"):  # `marathon log --json | head` ends quietly, as a Unix tool does
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("marathon: interrupted", file=sys.stderr)
        return 130
    except (KeyError, ValueError) as exc:
        from server.service import UnknownInput

        if isinstance(exc, (UnknownInput, KeyError)):
            print(f"marathon: {exc.args[0] if exc.args else exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    # `python -m client.cli` runs this file as __main__; commands defined in other modules register
    # through `client.cli`, which must be this very module, not a second copy.
    sys.modules.setdefault("client.cli", sys.modules[__name__])
    sys.exit(main())
