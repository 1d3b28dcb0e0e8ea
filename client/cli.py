"""`marathon`: the one console script. Every subcommand's --help is its manual.

Subcommands register themselves in COMMANDS; heavy imports (torch, mcp) happen inside the command
that needs them, so `marathon --help` is instant. JSON output (--json) is a public schema, kept
stable and tested; human output goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def _read_source(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"marathon: no such file: {path}")
    return p.read_text(encoding="utf-8")


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


# -- compile / profile / baseline -------------------------------------------------------------------

def _compile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="candidate source file defining entry(*inputs)")
    p.add_argument("--problem", required=True, help="problem name (see `marathon problems`)")
    p.add_argument("--shape", default="bench", help="shape whose launches are compiled (default bench)")
    p.add_argument("--asm", action="store_true", help="include PTX and SASS of every kernel")
    p.add_argument("--json", action="store_true", help="machine-readable output")


@command("compile", "compile a candidate's kernels for Hopper (sm_90) and report resources")(_compile_args)
def cmd_compile(args: argparse.Namespace) -> int:
    source = _read_source(args.file)
    svc = _service()
    try:
        report = svc.compile(args.problem, source, args.shape, want_asm=args.asm,
                             client={"name": "marathon-cli"})
    finally:
        svc.close()
    emit(report, args.json, format_compile)
    return 0 if report["ok"] else 1


def format_compile(r: dict[str, Any]) -> str:
    lines = [f"compile {r['problem']}/{r['shape']} for {r['target']}: {'ok' if r['ok'] else 'FAILED'}"
             + (" (cached)" if r.get("cached") else "")]
    for k in r.get("kernels", []):
        lines.append(f"  {k['name']}: {k['registers']} regs, {k['spill_bytes']} B spilled, "
                     f"{k['shared_bytes']} B shared, warps={k['num_warps']} stages={k['num_stages']}, "
                     f"wgmma={'yes' if k['uses_wgmma'] else 'no'}, tma={'yes' if k.get('uses_tma') else 'no'}")
        if k.get("sass"):
            lines.append(k["sass"])
    for e in r.get("errors", []):
        where = f"line {e['line']}: " if e.get("line") else ""
        lines.append(f"  error: {where}{e['message']}")
    return "\n".join(lines)


def _profile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="candidate source file defining entry(*inputs)")
    p.add_argument("--problem", required=True, help="problem name (see `marathon problems`)")
    p.add_argument("--shape", default="bench", help="shape to check and time (default bench)")
    p.add_argument("--graph", choices=["auto", "on", "off"], default="auto",
                   help="time CUDA-graph replays (auto: when a call takes under 200 us)")
    p.add_argument("--baseline", help="baseline to time against (default: the problem's first available)")
    p.add_argument("--timeout", type=float, help="seconds before the job is stopped (default 600)")
    p.add_argument("--ncu", action="store_true",
                   help="also run the candidate under Nsight Compute (where ncu exists) and report its kernel time")
    p.add_argument("--json", action="store_true", help="machine-readable output")


@command("profile", "check a candidate on fresh inputs and time it against a baseline")(_profile_args)
def cmd_profile(args: argparse.Namespace) -> int:
    source = _read_source(args.file)
    graph = {"auto": None, "on": True, "off": False}[args.graph]
    svc = _service()
    try:
        report = svc.profile(args.problem, source, args.shape, client={"name": "marathon-cli"},
                             progress=None if args.json else stderr_progress, graph=graph,
                             baseline=args.baseline, timeout=args.timeout, ncu=args.ncu)
    finally:
        svc.close()
    emit(report, args.json, format_profile)
    return 0 if report.get("ok") else 1


def format_profile(r: dict[str, Any]) -> str:
    dev = r.get("device") or {}
    lines = [f"profile {r['problem']}/{r['shape']} on {dev.get('name', '?')}: "
             + ("correct" if r.get("correct") else f"NOT OK [{r.get('error_class')}]")]
    if r.get("error"):
        where = f" (line {r['error_line']})" if r.get("error_line") else ""
        lines.append(f"  error{where}: {r['error']}")
    if r.get("max_rel_err") is not None:
        lines.append(f"  max relative error {r['max_rel_err']:.2e} over {len(r.get('trials') or [])} trials "
                     f"at {', '.join(r.get('shapes_checked') or [])}")
    t = r.get("timing")
    if t:
        lines.append(f"  time {t['median_us']:.2f} us median ({t['mode']}, {t['reps']} reps, "
                     f"IQR {t['spread_pct']:.1f}%)")
        b = r.get("baseline") or {}
        if b.get("median_us"):
            lines.append(f"  baseline {b['name']}: {b['median_us']:.2f} us -> speedup {r['speedup']:.2f}x")
        elif b.get("error"):
            lines.append(f"  baseline: {b['error']}")
        a = r.get("achieved") or {}
        if a:
            share = f" ({100 * a['dram_share']:.0f}% of measured DRAM)" if a.get("dram_share") else ""
            lines.append(f"  {a['gbps']:.0f} GB/s{share}, {a['tflops']:.2f} TFLOP/s")
        n = r.get("ncu") or {}
        if n.get("ok"):
            lines.append(f"  Nsight Compute: {n['gpu_time_us_per_call']:.2f} us of kernel time per call "
                         f"(profile median {n.get('profile_vs_ncu_pct', 0):+.1f}% from it)")
        elif n.get("error"):
            lines.append(f"  Nsight Compute: {n['error'][:200]}")
        tele = (r.get("telemetry") or {}).get("after") or {}
        if tele.get("sm_clock_mhz"):
            lines.append(f"  GPU: SM {tele['sm_clock_mhz']} MHz, {tele['temperature_c']} C, "
                         f"{tele['power_w']:.0f} W, throttle: {', '.join(tele['throttle_reasons']) or 'none'}")
    elif r.get("timing_note"):
        lines.append(f"  {r['timing_note']}")
    if r.get("output_tail"):
        lines.append(f"  candidate output (tail): {r['output_tail'][-300:]!r}")
    return "\n".join(lines)


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
    emit(report, args.json, format_baseline)
    return 0 if report.get("ok") else 1


def format_baseline(r: dict[str, Any]) -> str:
    dev = r.get("device") or {}
    lines = [f"baselines {r['problem']}/{r['shape']} on {dev.get('name', '?')}"
             + (" (from the log)" if r.get("cached") else "")]
    if r.get("timing_note"):
        lines.append(f"  {r['timing_note']}")
    for b in r.get("baselines", []):
        if not b.get("available"):
            lines.append(f"  {b['name']}: unavailable ({b.get('reason')})")
            continue
        for mode, t in (b.get("timing") or {}).items():
            if "error" in t:
                lines.append(f"  {b['name']} [{mode}]: failed: {t['error'][:200]}")
            else:
                lines.append(f"  {b['name']} [{mode}]: {t['median_us']:.2f} us (IQR {t['spread_pct']:.1f}%, "
                             f"{t['reps']} reps), {t['gbps']:.0f} GB/s, {t['tflops']:.2f} TFLOP/s")
    return "\n".join(lines)


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
    """Commands that live beside their capability (serve, run, ...) register on import."""
    import importlib

    for module in ("server.cli_serve", "client.cli_run"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


def main(argv: list[str] | None = None) -> int:
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
