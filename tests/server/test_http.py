"""`marathon serve --http` in a subprocess on a free loopback port: 401 without or with a wrong
token, a real client call with it; the token from $MARATHON_TOKEN or a 0600 file; the body limit."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import Implementation
from mcp_types import INVALID_REQUEST

from server.body_limit import HTTP_MAX_BODY_BYTES
from server.service import MAX_SOURCE_BYTES
from tests.server.common import STARTER, TOOLS, free_port, http_server, intents

pytestmark = pytest.mark.slow

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "curl-like", "version": "0"}}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _post(url: str, token: str | None) -> httpx.Response:
    headers = dict(HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(url, json=INIT, headers=headers, timeout=30)


def _client(url: str, token: str, mode: str) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(url, http_client=http), mode=mode,
                  client_info=Implementation(name=f"http-{mode}", version="1"))


def test_http_needs_the_token_and_serves_a_real_client_with_it(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with http_server(tmp_path, port):
        token_file = tmp_path / "token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32
        stderr = (tmp_path / "serve.stderr").read_text()
        assert str(token_file) in stderr and token not in stderr

        missing = _post(url, None)
        assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
        assert _post(url, "wrong-" + token).status_code == 401
        assert _post(url, token[:-1]).status_code == 401
        assert _post(url, token).status_code == 200
        # No OAuth discovery is served, so clients use the configured header instead of starting OAuth.
        for well_known in ("oauth-protected-resource", "oauth-authorization-server"):
            assert httpx.get(f"http://127.0.0.1:{port}/.well-known/{well_known}", timeout=30).status_code == 404

        async def main() -> dict[str, Any]:
            out: dict[str, Any] = {}
            async with _client(url, token, "legacy") as c:
                out["version"] = c.protocol_version
                out["tools"] = {t.name for t in (await c.list_tools()).tools}
                out["compile"] = await c.call_tool("compile", {"problem": "softmax", "source": STARTER})
            async with _client(url, token, "auto") as c:
                out["modern"] = (c.protocol_version, await c.call_tool("best", {"problem": "softmax"}))
            return out

        out = anyio.run(main)
    assert out["tools"] == TOOLS
    comp = out["compile"]
    assert not comp.is_error and comp.structured_content["ok"] and comp.structured_content["kernels"]
    version, best = out["modern"]
    assert version == "2026-07-28" and not best.is_error and best.structured_content["found"] is False
    logged = {p["client"]: p for p in intents(tmp_path / "marathon.db")}
    assert set(logged) == {"http-legacy", "http-auto"}
    assert logged["http-legacy"]["session"]  # the Mcp-Session-Id of that connection


def test_http_token_from_the_environment_wins(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    token = "env-token-" + "x" * 32
    with http_server(tmp_path, port, MARATHON_TOKEN=token):
        assert not (tmp_path / "token").exists()
        assert _post(url, "env-token-").status_code == 401
        assert _post(url, token).status_code == 200
    assert "from $MARATHON_TOKEN" in (tmp_path / "serve.stderr").read_text()


def test_http_takes_the_largest_source_and_answers_a_larger_body_as_json_rpc(tmp_path: Path) -> None:
    """A source at the service's limit, written the longest way JSON allows (a control character is six bytes),
    gets the service's answer; a body over the HTTP limit gets a JSON-RPC error the client reports as the
    call's, and the session goes on."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    # 1 MiB, so the size check passes; the NUL at the end is then refused at once, without a compile.
    longest = "\x01" * (MAX_SOURCE_BYTES - 1) + "\x00"
    assert len(json.dumps(longest)) > 4 * 2**20  # over the SDK's own limit
    too_big = "#" * HTTP_MAX_BODY_BYTES
    with http_server(tmp_path, port):
        token = (tmp_path / "token").read_text().strip()

        async def main() -> dict[str, Any]:
            out: dict[str, Any] = {}
            async with _client(url, token, "auto") as c:
                out["longest"] = await c.call_tool("compile", {"problem": "softmax", "source": longest})
                try:
                    await c.call_tool("compile", {"problem": "softmax", "source": too_big})
                except MCPError as exc:
                    out["too_big"] = exc.error
                out["after"] = await c.call_tool("best", {"problem": "softmax"})
            return out

        out = anyio.run(main)
        headers = {**HEADERS, "Authorization": f"Bearer {token}"}
        raw = httpx.post(url, content=b" " * (HTTP_MAX_BODY_BYTES + 1), headers=headers, timeout=60)
    assert out["longest"].is_error and "NUL" in out["longest"].content[0].text
    error = out["too_big"]
    assert error.code == INVALID_REQUEST and "request body too large" in error.message
    assert f"{HTTP_MAX_BODY_BYTES:,}" in error.message
    assert not out["after"].is_error
    assert raw.status_code == 413 and raw.headers["content-type"].startswith("application/json")
    body = raw.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == INVALID_REQUEST
