"""The click plumbing of `marathon`: a group that loads a subcommand's module only when it is needed.

`marathon --help` lists every command from the registry's one-line summaries without importing a
single command module, so it stays instant (no torch, no mcp); a command's module is imported when that
command runs or its --help is shown. The summary is also the command's help: it is written once, in the
registry (cli.main.COMMANDS), so the two can never disagree (a command function's docstring is not
its help; what its positional arguments mean goes in the command's epilog).

Every subcommand is a `Command` (the class below): its usage line reads "usage: marathon CMD ..." as
argparse wrote it, so scripts and tests that look for it still find it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click


class Formatter(click.HelpFormatter):
    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog, args, "usage: " if prefix is None else prefix)


class Context(click.Context):
    formatter_class = Formatter


class Command(click.Command):
    """A `marathon` subcommand (its help comes from the registry). As under argparse, a long option may
    be shortened to any prefix that names one option alone (`--max-s 8` is `--max-steps 8`)."""

    context_class = Context

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._unabbreviated(ctx, args))

    def _unabbreviated(self, ctx: click.Context, args: list[str]) -> list[str]:
        names = {name for param in self.get_params(ctx) for name in (*param.opts, *param.secondary_opts)
                 if name.startswith("--")}
        out: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                return out + args[i:]
            flag, eq, value = arg.partition("=")
            if flag.startswith("--") and flag not in names:
                matches = sorted(name for name in names if name.startswith(flag))
                if len(matches) == 1:
                    arg = matches[0] + eq + value
                elif len(matches) > 1:
                    raise click.UsageError(f"ambiguous option: {flag} could match {', '.join(matches)}", ctx)
            out.append(arg)
        return out


@dataclass(frozen=True)
class Entry:
    """Where a command lives ("module:attribute") and what it does, in one line."""

    target: str
    summary: str

    def load(self) -> click.Command:
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        command.help = command.short_help = self.summary
        return command


class LazyGroup(click.Group):
    """A group whose commands are `Entry`s, loaded on first use and listed in the registry's order."""

    context_class = Context

    def __init__(self, *args: Any, entries: Mapping[str, Entry], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entries = dict(entries)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.entries)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = self.entries.get(cmd_name)
        if entry is None:
            return None
        command = entry.load()
        if command.name != cmd_name:
            raise RuntimeError(f"{entry.target} is command {command.name!r}, registered as {cmd_name!r}")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.summary) for name, entry in self.entries.items()])
