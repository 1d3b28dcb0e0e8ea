"""The client's MCP connection under failure: a call that never answers, a server that crashes, HTTP.

None of these may end a run: a stalled call times out on its own timeout and the connection is
rebuilt; after a crash the client reconnects, lists the tools again and re-sends what is safe (or
what the log proves never reached the server); over HTTP it needs the bearer token.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from client.goal import Budget, Goal
from client.loop import LoopOptions, start_run
from client.mcp_link import Link, LinkDown, ServerSpec, server_env
from client.policy import ToolCall, Turn, TurnContext
from state import EventLog
from tests.client.common import Scripted, check_invariants, drive, in_process, new_run
from tests.server.common import free_port, http_server


def test_a_call_that_never_answers_times_out_and_the_run_goes_on(tmp_path: Path) -> None:
    service, app = in_process(tmp_path)

    @app.tool(name="stall")
    async def stall() -> str:
        """Never answers in time."""
        await anyio.sleep(60)
        return "late"

    script = iter([Turn("", (ToolCall("s", "stall", {}),)), Turn("", (ToolCall("l", "list_problems", {}),))])
    with EventLog(tmp_path / "marathon.db") as log:
        new_run(log, "stall", 2)
    started = time.monotonic()
    try:
        policy = Scripted(lambda c: next(script))
        end, loop = anyio.run(functools.partial(drive, service.log, ServerSpec(app=app), policy, "stall",
                                                options=LoopOptions(default_timeout=0.5)))
    finally:
        service.close()
    assert time.monotonic() - started < 20 and end.state == "budget"
    summary = check_invariants(tmp_path / "marathon.db", "stall", 2)
    assert summary["statuses"] == {"timeout": 1, "ok": 1}
    assert loop.link.connects == 2  # the connection was rebuilt after the timeout


def _server_pid() -> int:
    """The `marathon serve` this process spawned (a child whose command line says so)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        if ppid == os.getpid() and "-m cli serve" in cmdline:
            return int(entry.name)
    raise AssertionError("no spawned server found")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="finds the spawned server through /proc")
def test_after_a_server_crash_the_client_reconnects_and_the_run_goes_on(tmp_path: Path) -> None:
    """kill -9 the spawned server twice: before a safe call (re-sent) and before a note (re-sent only
    because the shared log proves the dead server never started it)."""
    db = tmp_path / "marathon.db"

    def turn(ctx: TurnContext) -> Turn:
        step = ctx.pinned["step"] + 1
        if step in (3, 5):
            os.kill(_server_pid(), signal.SIGKILL)
            time.sleep(0.2)
        if step == 5:
            return Turn("", (ToolCall("n", "note", {"text": "exactly once", "problem": "softmax"}),))
        return Turn("", (ToolCall(f"l{step}", "list_problems", {}),))

    with EventLog(db) as log:
        new_run(log, "crash", 6)
        spec = ServerSpec(env=server_env("crash", tmp_path), errlog=tmp_path / "serve.err")
        end, loop = anyio.run(functools.partial(drive, log, spec, Scripted(turn), "crash"))
    assert end.state == "budget"
    summary = check_invariants(db, "crash", 6)
    assert summary["statuses"] == {"ok": 6} and summary["notes"] == 1
    assert loop.link.connects == 3 and {t.name for t in loop.link.tools} >= {"profile", "note", "best"}


@pytest.mark.slow
def test_over_http_with_a_token_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server with its own home (its own log): the client keeps its record in its own log."""
    server_home, client_home = tmp_path / "server", tmp_path / "client"
    server_home.mkdir()
    client_home.mkdir()
    token = "t0ken-for-the-client-test-123456"
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    monkeypatch.setenv("KM_TEST_TOKEN", token)
    monkeypatch.setenv("WRONG_TOKEN", "not-the-token-at-all-1234567")
    script = iter([Turn("", (ToolCall("a", "list_problems", {}),)),
                   Turn("", (ToolCall("b", "note", {"text": "over http", "problem": "softmax"}),)),
                   Turn("", (ToolCall("c", "read_resource", {"uri": "problem://softmax/starter"}),))])
    with http_server(server_home, port, MARATHON_TOKEN=token), EventLog(client_home / "marathon.db") as log:
        start_run(log, "http", Goal(problem="softmax", budget=Budget(steps=3)), policy="scripted")
        spec = ServerSpec(url=url, token_env="KM_TEST_TOKEN")
        end, _ = anyio.run(functools.partial(drive, log, spec, Scripted(lambda c: next(script)), "http"))

        async def wrong() -> None:
            link = Link(ServerSpec(url=url, token_env="WRONG_TOKEN"), reconnect_tries=1, backoff_s=0.01)
            await link.ensure()

        with pytest.raises(LinkDown):
            anyio.run(wrong)
    assert end.state == "budget"
    summary = check_invariants(client_home / "marathon.db", "http", 3)
    assert summary["statuses"] == {"ok": 3}
    with EventLog(server_home / "marathon.db") as server_log:
        keys = [e.key for e in server_log.events(run_id="http", kinds=["tool.intent"])]
        notes = server_log.events(kinds=["note"])
    assert [k.split(":")[2] for k in keys] == ["http/1", "http/2"]  # read_resource is not a tool call
    assert [n.payload["text"] for n in notes] == ["over http"]
