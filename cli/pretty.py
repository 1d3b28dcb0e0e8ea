"""Human output for a person at a terminal, drawn with rich: styled headings and tables.

`show` is `cli.output.emit` with one more branch: when stdout is a terminal (as rich's Console decides it:
a tty, or FORCE_COLOR / TTY_COMPATIBLE=1 set), the command's human output is drawn by a `*_view` below;
anywhere else (a pipe, a file, a test, CI) it is the command's plain text, byte for byte what it printed
before; --json is never drawn. rich is imported only when a command prints human output, never for
`--help`, and it is cheap (no torch, no mcp).

Every value that comes from the data is put in a `Text`, never parsed as rich markup: a payload's
`["a"]` or a kernel's `[i]` is printed as written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cli.output import emit

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

STATE_STYLES = {"running": "bold cyan", "interrupted": "bold yellow", "finished": "bold green", "failed": "bold red"}


def terminal_console() -> Console | None:
    """A rich Console on stdout when stdout is a terminal (or one is forced); None otherwise."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else None


def show(data: Any, as_json: bool, plain: Callable[[Any], str], view: Callable[[Any], RenderableType],
         console: Console | None = None) -> None:
    """--json as `emit` prints it; human output drawn by `view` on a terminal, `plain(data)` anywhere else.
    `console` (tests): draw on this one, whatever stdout is."""
    if not as_json:
        console = console or terminal_console()
        if console is not None:
            console.print(view(data))
            return
    emit(data, as_json, plain)


# -- marathon status ----------------------------------------------------------------------------------

def status_view(d: dict[str, Any]) -> RenderableType:
    """One run: a heading (its id and state), its numbers, and its best attempts as a table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from client.run_projection import fmt_us  # here, not at the top: it loads numpy, which `--help` must not

    heading = Text.assemble(("run ", "bold"), (str(d["run_id"]), "bold"), ": ",
                            (str(d["state"]), STATE_STYLES.get(d["state"], "bold")))
    if d.get("end_state"):
        heading.append(f" ({d['end_state']}: {d['reason']})", style="dim")

    spend = d.get("spend") or {}
    tokens = spend.get("tokens_in", 0) + spend.get("tokens_out", 0)
    of = f" of {d['budget']['steps']}" if (d.get("budget") or {}).get("steps") else ""
    outcomes = ", ".join(f"{k} {v}" for k, v in (d.get("outcomes") or {}).items()) or "-"
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim", no_wrap=True)
    facts.add_column()
    for key, value in (
            ("problem", f"{d['problem']}/{d['shape']}"),
            ("policy", f"{d.get('policy')}" + (f" ({d['model']})" if d.get("model") else "")),
            ("steps", f"{d['steps']}{of}, turns {d['turns']}"),
            ("attempts", f"{d['attempts']}: {outcomes}"),
            ("spent", f"{spend.get('active_s', 0) / 3600:.2f} h active, {tokens:,} tokens, "
                      f"${spend.get('cost_usd', 0):.2f}, {spend.get('compactions', 0)} compactions, "
                      f"{d.get('sessions', 1)} session(s)")):
        facts.add_row(key, Text(value))

    best, whole = d.get("best"), d.get("log_best")
    parts: list[RenderableType] = [heading, facts]
    if best is None and not (whole and whole.get("run_id") != d["run_id"]):
        parts.append(Text.assemble(("best of this run: ", "dim"), "none yet (no verified attempt)"))
    else:
        table = Table(title="best attempts", title_justify="left", title_style="bold")
        for name in ("", "outcome", "median us", "speedup", "attempt", "step", "event", "device"):
            table.add_column(name, justify="right" if name in ("median us", "speedup", "step", "event") else "left",
                             no_wrap=name in ("", "attempt", "event"))
        rows = [("this run", best)]
        if whole and whole.get("run_id") != d["run_id"]:
            rows.append(("whole log", whole))
        for label, a in rows:
            if a is None:
                table.add_row(label, Text("none yet (no verified attempt)", style="dim"))
                continue
            own = a.get("run_id") == d["run_id"]
            n = a.get("attempt_number")
            which = "-" if n is None else str(n)
            which += (f" of {d['attempts']}" if own and d.get("attempts") else "") if n is not None else ""
            which += "" if own else f" of run {a.get('run_id') or '-'}"
            outcome = a.get("outcome") or "?"
            table.add_row(label, Text(outcome, style="green" if outcome == "correct" else "red"),
                          "-" if a.get("median_us") is None else fmt_us(a["median_us"]),
                          "-" if a.get("speedup") is None else Text(f"{a['speedup']:.3g}x", style="bold"),
                          Text(which), str(a["step"]) if own and a.get("step") else "-",
                          "-" if a.get("attempt_id") is None else f"#{a['attempt_id']}",
                          Text(str(a.get("device") or "-")))
        parts.append(table)
    if d["state"] == "interrupted":
        parts.append(Text.assemble(("continue with: ", "dim"), (f"marathon resume {d['run_id']}", "bold")))
    return Group(*parts)


# -- marathon log -------------------------------------------------------------------------------------

def log_view(items: list[dict[str, Any]]) -> RenderableType:
    """The newest events as a table, oldest first (as the plain text lists them)."""
    from rich.table import Table
    from rich.text import Text

    if not items:
        return Text("(no events)", style="dim")
    table = Table(show_edge=False, header_style="bold")
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("time", no_wrap=True, style="dim")
    table.add_column("run", no_wrap=True)
    table.add_column("kind", no_wrap=True, style="cyan")
    table.add_column("payload", overflow="fold")  # the one column that wraps: the others keep their width
    for e in reversed(items):
        payload = json.dumps(e["payload"], default=str)
        if len(payload) > 100:
            payload = payload[:97] + "..."
        table.add_row(str(e["id"]), time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["ts"])),
                      Text(str(e["run_id"] or "-")), Text(str(e["kind"])), Text(payload))
    return table


# -- marathon problems --------------------------------------------------------------------------------

def problems_view(problems: list[dict[str, Any]]) -> RenderableType:
    """Each problem: its name and summary as a heading, its shapes as a table (one column per dimension),
    its tolerance and baselines; then the MCP resources that describe them."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = []
    for d in problems:
        parts.append(Text.assemble((str(d["name"]), "bold cyan"), ": ", str(d["summary"])))
        dims = list(dict.fromkeys(k for shape in d["shapes"].values() for k in shape))
        table = Table(show_edge=False, header_style="bold", padding=(0, 1))
        table.add_column("shape", no_wrap=True)
        for k in dims:
            table.add_column(k, justify="right", no_wrap=True)
        for shape, values in d["shapes"].items():
            table.add_row(Text(str(shape)), *(Text(str(values.get(k, "-"))) for k in dims))
        parts.append(table)
        tol = d.get("tolerance") or {}
        baselines = ", ".join(b["name"] for b in d.get("baselines", [])) or "-"
        parts.append(Text.assemble(("  tolerance ", "dim"),
                                   f"rel_err={tol.get('rel_err')} atol={tol.get('atol')} rtol={tol.get('rtol')}",
                                   ("; baselines: ", "dim"), baselines))
        parts.append(Text(""))
    parts.append(Text("resources: problem://{name}/description, /reference, /starter, /shapes; "
                      "best://{name}/{shape}", style="dim"))
    return Group(*parts)
