"""`marathon serve` over stdio in a real subprocess: through mcp.Client, and as raw JSON-RPC lines
from a client speaking an older protocol version. stdout must carry nothing but the protocol."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import Implementation
from mcp_types import INVALID_PARAMS

from tests.server.common import ROOT, STARTER, TOOLS, intents, server_env

pytestmark = pytest.mark.slow


def _params(home: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "cli", "serve"], env=server_env(home),
                                 cwd=str(ROOT))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_stdio_server_runs_tools_and_logs_the_caller(tmp_path: Path, mode: str) -> None:
    async def main() -> dict[str, Any]:
        async with Client(_params(tmp_path), mode=mode,
                          client_info=Implementation(name=f"stdio-{mode}", version="1")) as c:
            out: dict[str, Any] = {"tools": {t.name for t in (await c.list_tools()).tools}}
            out["problems"] = await c.call_tool("list_problems", {})
            out["bad"] = await c.call_tool("profile", {"problem": "no_such", "source": STARTER})
            if mode == "auto":
                out["compile"] = await c.call_tool("compile", {"problem": "softmax", "source": STARTER})
            return out

    out = anyio.run(main)
    assert out["tools"] == TOOLS
    assert not out["problems"].is_error and out["problems"].structured_content["problems"]
    assert out["bad"].is_error and "unknown problem" in out["bad"].content[0].text
    if mode == "auto":
        comp = out["compile"]
        assert not comp.is_error and comp.structured_content["kernels"][0]["registers"] > 0
    logged = intents(tmp_path / "marathon.db")
    assert {p["client"] for p in logged} == {f"stdio-{mode}"}
    sessions = {p["session"] for p in logged}
    assert len(sessions) == 1 and next(iter(sessions)).startswith("stdio-")
    assert "serving MCP over stdio" in (tmp_path / "logs" / "server.log").read_text()


def test_bad_requests_over_stdio_are_the_callers_errors_with_no_traceback(tmp_path: Path) -> None:
    """A bad prompt request is invalid params (the SDK's wire dispatcher would answer code 0), an id past
    SQLite's range and a string for an integer are tool errors naming the argument; the server logs no
    traceback for any of them, and best:// reads before anything is verified."""
    async def prompt_error(c: Client, name: str, args: dict[str, str]) -> tuple[int, str]:
        try:
            await c.get_prompt(name, args)
        except MCPError as exc:
            return exc.error.code, exc.error.message
        raise AssertionError(f"prompt {name} {args} answered")

    async def main() -> dict[str, Any]:
        async with Client(_params(tmp_path)) as c:
            return {"unknown": await prompt_error(c, "no_such_prompt", {}),
                    "missing": await prompt_error(c, "optimize", {}),
                    "id": await c.call_tool("attempt", {"id": 2**63}),
                    "limit": await c.call_tool("attempts", {"limit": "5"}),
                    "best": (await c.read_resource("best://softmax/bench")).contents[0]}

    out = anyio.run(main)
    assert out["unknown"][0] == INVALID_PARAMS and "unknown prompt 'no_such_prompt'" in out["unknown"][1]
    assert out["missing"][0] == INVALID_PARAMS and "needs the argument 'problem'" in out["missing"][1]
    for key, words in (("id", "less than or equal to 9223372036854775807"), ("limit", "valid integer")):
        r = out[key]
        assert r.is_error and words in r.content[0].text and "internal error" not in r.content[0].text, key
    assert out["best"].text.startswith("# best for softmax/bench: none")
    log = (tmp_path / "logs" / "server.log").read_text()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def test_raw_jsonrpc_with_an_older_protocol_and_nothing_else_on_stdout(tmp_path: Path) -> None:
    env = {**os.environ, **server_env(tmp_path)}
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "serve"], cwd=ROOT, env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    def answer(request_id: int) -> dict[str, Any]:
        assert proc.stdout is not None
        while True:
            line = proc.stdout.readline()
            assert line, "the server closed stdout"
            message = json.loads(line)  # any non-JSON line on stdout fails here
            assert message.get("jsonrpc") == "2.0", line
            if message.get("id") == request_id:
                return message

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                         "clientInfo": {"name": "raw-client", "version": "0"}}})
        init = answer(1)["result"]
        assert init["protocolVersion"] == "2025-03-26"
        assert init["serverInfo"]["name"] == "kernel-marathon" and "tools" in init["capabilities"]
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert {t["name"] for t in answer(2)["result"]["tools"]} == TOOLS
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
              "params": {"name": "list_problems", "arguments": {}}})
        result = answer(3)["result"]
        assert not result.get("isError") and "softmax" in result["content"][0]["text"]
        send({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
              "params": {"name": "best", "arguments": {"problem": "softmax", "shape": "nope"}}})
        result = answer(4)["result"]
        assert result["isError"] and "no shape 'nope'" in result["content"][0]["text"]
        proc.stdin.close()
        assert proc.stdout.read() == ""  # nothing after the last answer either
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "serving MCP over stdio" in (tmp_path / "stderr.txt").read_text()
    assert {p["client"] for p in intents(tmp_path / "marathon.db")} == {"raw-client"}


def test_claim_stdio_diverts_stray_output_from_the_protocol(tmp_path: Path) -> None:
    script = ("import os, sys\n"
              "from server.transport import claim_stdio\n"
              "proto_in, proto_out = claim_stdio()\n"
              "print('stray print')\n"
              "sys.stdout.flush()\n"
              "os.system('echo child output; cat')\n"  # a child: its stdout is stderr, its stdin is empty
              "proto_out.write(proto_in.readline().upper())\n")
    proc = subprocess.run([sys.executable, "-c", script], input="ping\n", capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "PING\n"
    assert "stray print" in proc.stderr and "child output" in proc.stderr
