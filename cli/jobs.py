"""`marathon compile`, `profile`, `baseline`, `hotspots`: the engine's jobs, run in this process.

No server is involved: each command opens the service (server.service, the same logged operations the
MCP tools run, so a CLI call and an MCP call give the same result and the same log entries), runs one
job with progress lines on stderr, and prints the report: JSON with --json, else the summary the MCP
tools send (server.summaries). Exit 0 when the job says ok, 1 when it does not, 2 when the input is the
caller's to fix (an unknown problem or shape, a file that cannot be a candidate), with one line saying why.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import click

from cli.group import Command
from cli.output import emit_result, json_option, refuse, stderr_progress
from server import models, summaries

CLIENT = {"name": "marathon-cli"}
CANDIDATE = "FILE: the candidate source file, defining entry(*inputs)"


def read_source(path: str, problem: str | None = None) -> str:
    """The candidate file's text, or one line saying why it cannot be one (exit 2, nothing logged)."""
    from server.service import MAX_SOURCE_BYTES  # the service imports torch

    p = Path(path)
    about = f" (problem {problem})" if problem else ""

    def no(why: str) -> NoReturn:
        refuse(f"{path}{about}: {why}")

    if p.is_dir():
        no("is a directory; give the candidate's .py file")
    if not p.exists():
        no("no such file")
    try:
        size = p.stat().st_size
        if size > MAX_SOURCE_BYTES:
            no(f"is {size:,} bytes; a candidate file may hold at most {MAX_SOURCE_BYTES:,}")
        data = p.read_bytes()
    except OSError as exc:
        no(f"cannot be read: {exc.strerror or exc}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        no(f"is not UTF-8 text (byte {exc.start}); a candidate is a Python source file")
    if "\x00" in text:
        no("holds NUL bytes; a candidate is a Python source file")
    return text


@contextmanager
def service() -> Iterator[Any]:
    """The service for one job, closed after it; a request it refuses (UnknownInput) ends the command
    with its one line and exit 2."""
    from server.service import Service, UnknownInput

    svc = Service()
    try:
        yield svc
    except UnknownInput as exc:
        refuse(str(exc.args[0] if exc.args else exc))
    finally:
        svc.close()


def _progress(as_json: bool) -> Any:
    return None if as_json else stderr_progress


problem_option = click.option("--problem", required=True, metavar="NAME", help="problem name (see `marathon problems`)")


@click.command("compile", cls=Command, epilog=CANDIDATE)
@click.argument("file")
@problem_option
@click.option("--shape", default="bench", metavar="SHAPE", help="shape whose launches are compiled (default bench)")
@click.option("--asm", is_flag=True, help="include PTX and SASS of every kernel")
@click.option("--timeout", type=float, metavar="S",
              help="seconds before the compile is stopped (default: MARATHON_JOB_TIMEOUT, else 180 s to capture the "
                   "launches and 300 s to compile them)")
@click.option("--lines", is_flag=True,
              help="per kernel, its instructions by source line: shared memory, barriers, shuffles, MMAs, global and "
                   "spill traffic")
@json_option()
def compile_(file: str, problem: str, shape: str, asm: bool, timeout: float | None, lines: bool,
             as_json: bool) -> int:
    source = read_source(file, problem)
    with service() as svc:
        report = svc.compile(problem, source, shape, want_asm=asm, want_lines=lines, client=dict(CLIENT),
                             timeout=timeout, progress=_progress(as_json))
    emit_result(report, models.CompileResult, as_json, summaries.compile_text)
    return 0 if report.ok else 1


@click.command("profile", cls=Command, epilog=CANDIDATE)
@click.argument("file")
@problem_option
@click.option("--shape", default="bench", metavar="SHAPE", help="shape to check and time (default bench)")
@click.option("--graph", type=click.Choice(["auto", "on", "off"]), default="auto",
              help="time CUDA-graph replays (auto: when a call takes under 200 us)")
@click.option("--baseline", metavar="NAME", help="baseline to time against (default: the problem's first available)")
# No Choice: the service checks the value, so the CLI's answer to a bad one is the MCP tool's.
@click.option("--l2", default="cold", metavar="{cold,warm}",
              help="L2 state before each timed rep, the baseline's too: cold (default) flushes it; warm does not "
                   "(warm timings are not verified and never become a best)")
@click.option("--timeout", type=float, metavar="S", help="seconds before the job is stopped (default 600)")
@click.option("--ncu", is_flag=True,
              help="also run the candidate under Nsight Compute (where ncu exists) and report its kernel time")
@json_option()
def profile(file: str, problem: str, shape: str, graph: str, baseline: str | None, l2: str, timeout: float | None,
            ncu: bool, as_json: bool) -> int:
    source = read_source(file, problem)
    with service() as svc:
        report = svc.profile(problem, source, shape, client=dict(CLIENT), progress=_progress(as_json),
                             graph={"auto": None, "on": True, "off": False}[graph], baseline=baseline,
                             timeout=timeout, ncu=ncu, l2=l2)
    emit_result(report, models.ProfileResult, as_json, summaries.profile_text)
    return 0 if report.ok else 1


@click.command("baseline", cls=Command)
@problem_option
@click.option("--shape", default="bench", metavar="SHAPE", help="shape to time (default bench)")
@click.option("--refresh", is_flag=True, help="measure again even if the log has this baseline")
@json_option()
def baseline(problem: str, shape: str, refresh: bool, as_json: bool) -> int:
    with service() as svc:
        report = svc.baseline(problem, shape, refresh=refresh, client=dict(CLIENT), progress=_progress(as_json))
    emit_result(report, models.BaselineResult, as_json, summaries.baseline_text)
    return 0 if report.ok else 1


@click.command("hotspots", cls=Command, epilog=CANDIDATE)
@click.argument("file")
@problem_option
@click.option("--shape", default="bench", metavar="SHAPE", help="shape to run (default bench)")
@click.option("--top", type=int, default=15, help="source lines to list per kernel (default 15)")
@click.option("--save", type=click.Path(path_type=Path),
              help="keep ncu's report, its source page and the cubins in this folder")
@json_option()
def hotspots(file: str, problem: str, shape: str, top: int, save: Path | None, as_json: bool) -> int:
    source = read_source(file, problem)
    with service() as svc:
        report = svc.hotspots(problem, source, shape, top=top, save_dir=save, client=dict(CLIENT),
                              progress=_progress(as_json))
    emit_result(report, models.HotspotsResult, as_json, summaries.hotspots_text)
    return 0 if report.ok else 1
