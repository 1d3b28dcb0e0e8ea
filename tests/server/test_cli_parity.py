"""The same compile over MCP and over the CLI gives the same result: both go through Service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from server.app import build_app
from server.service import Service
from tests.server.common import ROOT, STARTER, SYNTAX

# What differs between two calls by design: wall time, cache hits, the log's ids.
IGNORED = {"elapsed_s", "cached", "attempt_id"}


def _cli_compile(home: Path, source: str, *flags: str) -> tuple[int, dict[str, Any]]:
    path = home / "candidate.py"
    path.write_text(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MARATHON_HOME": str(home)}
    proc = subprocess.run([sys.executable, "-m", "cli", "compile", str(path), "--problem", "softmax", "--json",
                           *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, json.loads(proc.stdout)


def _mcp_compile(source: str, **options: Any) -> Any:
    service = Service()  # the same MARATHON_HOME as the CLI run (set per test by conftest)
    try:
        async def main() -> Any:
            async with Client(build_app(service)) as c:
                return await c.call_tool("compile", {"problem": "softmax", "source": source, **options})

        return anyio.run(main)
    finally:
        service.close()


@pytest.mark.parametrize("source", [STARTER, SYNTAX], ids=["starter", "syntax_error"])
def test_compile_over_mcp_and_over_the_cli_agree(marathon_home: Path, source: str) -> None:
    code, cli = _cli_compile(marathon_home, source)
    result = _mcp_compile(source)
    mcp = result.structured_content
    assert (code == 0) == cli["ok"] == (not result.is_error) == mcp["ok"]
    compared = set(cli) - IGNORED
    assert compared == set(mcp) - IGNORED, compared ^ (set(mcp) - IGNORED)  # one schema, the same fields
    assert {k: mcp[k] for k in compared} == {k: cli[k] for k in compared}
    assert mcp["attempt_id"] != cli["attempt_id"]  # two calls, two attempts in one log


def test_instructions_by_line_over_mcp_and_over_the_cli_agree(marathon_home: Path) -> None:
    code, cli = _cli_compile(marathon_home, STARTER, "--lines")
    mcp = _mcp_compile(STARTER, lines=True).structured_content
    assert code == 0 and mcp["ok"]
    (cli_kernel,), (mcp_kernel,) = cli["kernels"], mcp["kernels"]
    assert cli_kernel["lines"] and mcp_kernel["lines"] == cli_kernel["lines"]  # "global" keeps its name


@pytest.mark.parametrize(("option", "value", "fragments"), [
    ("l2", "hot", ["'hot'", "cold, warm"]),
    ("baseline", "nonsense", ["no baseline 'nonsense'", "torch"]),  # refused without a GPU too: nothing is timed
], ids=["l2", "baseline"])
def test_a_bad_option_gets_the_same_answer_from_the_service_the_cli_and_mcp(marathon_home: Path, option: str,
                                                                            value: str, fragments: list[str]) -> None:
    """The service checks the value, once, before anything is logged or run; the CLI and the MCP tool pass it
    through, so all three give its message."""
    from server.service import UnknownInput
    from state import EventLog

    service = Service()
    try:
        with pytest.raises(UnknownInput) as refused:
            service.profile("softmax", STARTER, **{option: value})
    finally:
        service.close()
    message = str(refused.value)
    assert all(f in message for f in fragments), message

    path = marathon_home / "candidate.py"
    path.write_text(STARTER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MARATHON_HOME": str(marathon_home)}
    proc = subprocess.run([sys.executable, "-m", "cli", "profile", str(path), "--problem", "softmax",
                           f"--{option}", value, "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr == f"marathon: {message}\n", proc.stderr

    service = Service()
    try:
        async def main() -> Any:
            async with Client(build_app(service)) as c:
                return await c.call_tool("profile", {"problem": "softmax", "source": STARTER, option: value})

        result = anyio.run(main)
    finally:
        service.close()
    assert result.is_error and message in result.content[0].text, result.content
    with EventLog() as log:
        assert not log.events(kinds=["tool.intent"], limit=5), "a refused value was logged as a call"
