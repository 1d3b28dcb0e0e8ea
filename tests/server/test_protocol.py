"""Protocol details through mcp.Client in memory: a bad prompt request is invalid params (no traceback
logged), integer arguments are bounded by what SQLite stores, argument types are held to the schema,
and every listed resource reads without an error, best:// before anything is verified included."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp_types import INVALID_PARAMS

from server.app import build_app
from server.args import SQLITE_MAX_INT
from server.service import Service
from state import EventLog
from tests.server.common import STARTER


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Any]]:
    home = tmp_path_factory.mktemp("mcp_protocol")
    service = Service(log=EventLog(home / "marathon.db"), cache_dir=home / "cache")
    try:
        yield service, build_app(service)
    finally:
        service.close()


def with_client(app: Any, body: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with Client(app) as c:
            return await body(c)

    return anyio.run(main)


def text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def intent_count(service: Service) -> int:
    return len(service.log.events(kinds=["tool.intent"]))


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


@pytest.mark.parametrize(("name", "args", "words"), [
    ("no_such_prompt", {}, ["unknown prompt 'no_such_prompt'", "optimize"]),
    ("optimize", {}, ["needs the argument 'problem'", "shape"]),
    ("optimize", {"problem": "softmax", "bogus": "x"}, ["takes no argument 'bogus'"]),
    ("optimize", {"problem": "no_such"}, ["unknown problem 'no_such'", "softmax"]),
    ("optimize", {"problem": "softmax", "shape": "huge"}, ["no shape 'huge'"]),
])
def test_a_bad_prompt_request_is_invalid_params_and_logs_no_traceback(
        served: tuple[Service, Any], caplog: pytest.LogCaptureFixture, name: str, args: dict[str, str],
        words: list[str]) -> None:
    _, app = served

    async def body(c: Client) -> MCPError:
        with pytest.raises(MCPError) as caught:
            await c.get_prompt(name, args)
        return caught.value

    with caplog.at_level(logging.DEBUG):
        error = with_client(app, body)
    assert error.error.code == INVALID_PARAMS
    for w in words:
        assert w in error.error.message, (w, error.error.message)
    assert not tracebacks(caplog)


@pytest.mark.parametrize(("tool", "args", "field"), [
    ("attempts", {"offset": SQLITE_MAX_INT + 1}, "offset"),
    ("attempts", {"offset": 10**30}, "offset"),
    ("attempt", {"id": SQLITE_MAX_INT + 1}, "id"),
    ("attempt", {"id": -(2**70)}, "id"),
    ("hotspots", {"problem": "softmax", "source": STARTER, "top": 101}, "top"),
])
def test_an_integer_out_of_range_is_refused_like_any_bad_argument(
        served: tuple[Service, Any], caplog: pytest.LogCaptureFixture, tool: str, args: dict[str, Any],
        field: str) -> None:
    service, app = served
    before = intent_count(service)
    with caplog.at_level(logging.DEBUG):
        r = with_client(app, lambda c: c.call_tool(tool, args))
    assert r.is_error
    text = text_of(r)
    assert f"validation error for {tool}Arguments" in text and field in text, text
    assert "internal error" not in text and "retried" not in text
    assert intent_count(service) == before  # refused before the service saw it
    assert not tracebacks(caplog)


def test_the_largest_integers_sqlite_stores_are_accepted(served: tuple[Service, Any]) -> None:
    _, app = served

    async def body(c: Client) -> tuple[Any, Any]:
        return (await c.call_tool("attempts", {"offset": SQLITE_MAX_INT}),
                await c.call_tool("attempt", {"id": SQLITE_MAX_INT}))

    page, one = with_client(app, body)
    assert not page.is_error and page.structured_content["attempts"] == []
    assert page.structured_content["next_offset"] is None
    assert one.is_error and "no attempt with id" in text_of(one)


def test_integer_arguments_publish_their_bounds(served: tuple[Service, Any]) -> None:
    _, app = served
    tools = {t.name: t.input_schema["properties"] for t in with_client(app, lambda c: c.list_tools()).tools}
    bounds = {(tool, arg): (props[arg]["minimum"], props[arg]["maximum"])
              for tool, props in tools.items() for arg in props if props[arg].get("type") == "integer"}
    assert bounds == {("attempts", "limit"): (1, 200), ("attempts", "offset"): (0, SQLITE_MAX_INT),
                      ("attempt", "id"): (1, SQLITE_MAX_INT), ("hotspots", "top"): (1, 100)}


@pytest.mark.parametrize(("tool", "args", "words"), [
    ("attempts", {"limit": "5"}, ["limit", "valid integer"]),
    ("attempts", {"limit": True}, ["limit", "valid integer"]),
    ("attempts", {"offset": 1.5}, ["offset", "valid integer"]),
    ("attempt", {"id": "3"}, ["id", "valid integer"]),
    ("attempt", {"id": False}, ["id", "valid integer"]),
    ("compile", {"problem": "softmax", "source": STARTER, "asm": "yes"}, ["asm", "valid boolean"]),
    ("compile", {"problem": "softmax", "source": STARTER, "lines": 1}, ["lines", "valid boolean"]),
    ("profile", {"problem": "softmax", "source": STARTER, "graph": "true"}, ["graph", "valid boolean"]),
    ("profile", {"problem": "softmax", "source": STARTER, "timeout_s": "60"}, ["timeout_s", "valid number"]),
    ("profile", {"problem": "softmax", "source": STARTER, "timeout_s": True}, ["timeout_s", "valid number"]),
    ("baseline", {"problem": "softmax", "refresh": 0}, ["refresh", "valid boolean"]),
    ("compile", {"problem": "softmax", "source": 5}, ["source", "valid string"]),
])
def test_a_value_of_the_wrong_type_is_refused_not_converted(
        served: tuple[Service, Any], tool: str, args: dict[str, Any], words: list[str]) -> None:
    service, app = served
    before = intent_count(service)
    r = with_client(app, lambda c: c.call_tool(tool, args))
    assert r.is_error
    for w in words:
        assert w in text_of(r), (w, text_of(r))
    assert intent_count(service) == before


def test_a_whole_number_written_as_a_float_is_an_integer(served: tuple[Service, Any]) -> None:
    """JSON Schema counts 2.0 as an integer, so the schema's promise holds for it too."""
    _, app = served
    r = with_client(app, lambda c: c.call_tool("attempts", {"limit": 2.0, "offset": 0.0}))
    assert not r.is_error, text_of(r)
    assert (r.structured_content["limit"], r.structured_content["offset"]) == (2, 0)


def test_every_listed_resource_reads_and_best_says_when_there_is_none(
        served: tuple[Service, Any], caplog: pytest.LogCaptureFixture) -> None:
    _, app = served

    async def body(c: Client) -> dict[str, Any]:
        listed = [str(r.uri) for r in (await c.list_resources()).resources]
        return {uri: (await c.read_resource(uri)).contents[0] for uri in [*listed, "best://kda/small"]}

    with caplog.at_level(logging.DEBUG):
        reads = with_client(app, body)
    assert not tracebacks(caplog)
    for uri in ("best://softmax/bench", "best://kda/small"):
        problem, shape = uri.removeprefix("best://").split("/")
        text = reads[uri].text
        assert text.startswith(f"# best for {problem}/{shape}: none (no verified attempt yet)\n"), text
        assert f"problem://{problem}/starter" in text
        assert all(line.startswith("#") for line in text.splitlines())  # still a Python file, as its type says
        assert reads[uri].mime_type == "text/x-python"


def test_an_unknown_problem_is_still_no_resource(served: tuple[Service, Any]) -> None:
    _, app = served

    async def body(c: Client) -> MCPError:
        with pytest.raises(MCPError) as caught:
            await c.read_resource("best://no_such/bench")
        return caught.value

    assert "unknown problem" in with_client(app, body).error.message
