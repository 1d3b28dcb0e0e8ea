"""Model providers through the real `openai` and `anthropic` SDKs against a local HTTP server.

Every test sends real requests over a socket to tests/client/fake_openai_server.py, so what is checked is
what the SDK puts on the wire (our message conversion inside it) and what we make of its typed
replies and exceptions: retries are the SDK's, the retryable/fatal verdict is ours.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import types

import httpx
import pytest

from client.policy import Message, ProviderError, ToolCall, ToolSpec, Turn, TurnContext
from client.providers import ProviderConfigError, make_provider, provider_names
from client.providers.errors import api_message, scrub
from client.providers.scripted import ScriptedPolicy
from tests.client.fake_openai_server import FakeModelServer, Reply, anthropic_message, chat_completion, error_reply

OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-9876543210fedcba"
TOOLS = [ToolSpec("compile", "Compile a kernel", {"type": "object", "properties": {"source": {"type": "string"}}}),
         ToolSpec("profile", "Time a kernel", {"type": "object", "properties": {}})]
# Variables either SDK would otherwise read for keys, URLs, organisations or headers.
SDK_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_ADMIN_KEY",
           "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE",
           "ANTHROPIC_CONFIG_DIR", "ANTHROPIC_CUSTOM_HEADERS", "MARATHON_MODEL", "MARATHON_PRICE_IN",
           "MARATHON_PRICE_OUT", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for name in SDK_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "no-anthropic-config"))


@pytest.fixture
def server():
    with FakeModelServer(max_lifetime_s=30) as fake:
        yield fake


def closed_port() -> int:
    """A port nothing listens on: bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def conversation() -> TurnContext:
    """A user goal, an assistant turn with two calls, their results (one failed), then a user note."""
    calls = (ToolCall("call_a", "compile", {"source": "x = 1"}), ToolCall("call_b", "profile", {}))
    return TurnContext(
        system="You optimise kernels.",
        messages=[
            Message("user", "Make softmax fast."),
            Message("assistant", "Compiling and timing.", tool_calls=calls),
            Message("tool", "compiled ok", tool_call_id="call_a"),
            Message("tool", "profile crashed", tool_call_id="call_b", is_error=True),
            Message("user", "Budget: 3 hours left."),
        ],
        tools=TOOLS,
        pinned={},
        max_output_tokens=1234,
    )


def openai(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch, **options):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    return make_provider("openai", "test-model", **options)


def anthropic(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch, **options):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
    return make_provider("anthropic", None, **options)


def assert_no_secret(error: BaseException, provider: object, key: str) -> None:
    # The SDK exception is not chained: its body may quote the key, and tracebacks print causes.
    assert key not in str(error) and key not in repr(error) and key not in repr(provider)
    assert error.__cause__ is None and error.__suppress_context__


# -- OpenAI-compatible: conversion both ways ---------------------------------------------------------------------


def test_openai_round_trip_with_tool_calls(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(chat_completion("Next: two calls.", [("compile", {"source": "y = 2"}), ("profile", '{"iters": 3,')],
                                prompt_tokens=2_000_000, completion_tokens=500_000))
    provider = openai(server, monkeypatch, price_in=3.0, price_out=15.0)
    turn = provider.next_turn(conversation())

    assert turn.text == "Next: two calls."
    assert [c.name for c in turn.tool_calls] == ["compile", "profile"]
    assert turn.tool_calls[0] == ToolCall("call_0", "compile", {"source": "y = 2"})
    assert turn.tool_calls[1].arguments == {"_raw": '{"iters": 3,'}  # broken JSON kept for the loop
    assert turn.stop_reason == "tool_use"
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (2_000_000, 500_000)
    assert turn.usage.cost_usd == pytest.approx(2 * 3.0 + 0.5 * 15.0)
    assert turn.model == "fake-model"

    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert request.headers["x-stainless-retry-count"] == "0"  # the SDK sent it
    body = request.json
    assert body["model"] == "test-model"
    assert body["max_tokens"] == 1234 and "max_completion_tokens" not in body  # a local server
    assert body["tools"][0] == {"type": "function", "function": {
        "name": "compile", "description": "Compile a kernel", "parameters": TOOLS[0].input_schema}}
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user"]
    assert body["messages"][0] == {"role": "system", "content": "You optimise kernels."}
    assistant = body["messages"][2]
    assert assistant["content"] == "Compiling and timing."
    assert assistant["tool_calls"][0] == {"id": "call_a", "type": "function",
                                          "function": {"name": "compile", "arguments": '{"source": "x = 1"}'}}
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {}
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "call_a", "content": "compiled ok"}
    assert body["messages"][4] == {"role": "tool", "tool_call_id": "call_b", "content": "[tool error] profile crashed"}
    assert body["messages"][5] == {"role": "user", "content": "Budget: 3 hours left."}


def test_openai_raw_arguments_go_back_as_the_model_wrote_them(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.push(chat_completion("ok"))
    context = conversation()
    context.messages[1] = Message("assistant", "", tool_calls=(ToolCall("c1", "compile", {"_raw": '{"source": '}),))
    context.messages[2:4] = [Message("tool", "bad arguments", tool_call_id="c1", is_error=True)]
    openai(server, monkeypatch, temperature=0.2).next_turn(context)
    body = server.requests[0].json
    assert body["messages"][2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "compile", "arguments": '{"source": '}}]}
    assert body["temperature"] == 0.2


def test_openai_plain_answer_ends_the_turn(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(chat_completion("All done.", finish_reason="length"))
    turn = openai(server, monkeypatch).next_turn(conversation())
    assert turn.tool_calls == () and turn.stop_reason == "max_tokens" and turn.text == "All done."
    assert turn.usage.cost_usd == 0.0  # no prices known


def test_local_server_quirks_are_accepted(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # No tool-call id, arguments as an object, "stop" although it is a tool call, content parts, no usage.
    server.push(Reply(body={"model": "m", "choices": [{"finish_reason": "stop", "message": {
        "content": [{"type": "text", "text": "Timing "}, {"type": "text", "text": "it."}],
        "tool_calls": [{"function": {"name": "profile", "arguments": {"iters": 5}}}]}}]}))
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    turn = make_provider("vllm", "m").next_turn(conversation())
    assert turn.tool_calls[0].name == "profile" and turn.tool_calls[0].arguments == {"iters": 5}
    assert turn.tool_calls[0].id.startswith("call_0_") and turn.stop_reason == "tool_use"
    assert turn.text == "Timing it." and turn.usage.input_tokens == 0
    assert "authorization" not in server.requests[0].headers  # no key: no header, not a placeholder


def test_extra_body_and_headers_reach_the_server(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(chat_completion("ok"))
    openai(server, monkeypatch, extra_body={"top_k": 20}, extra_headers={"x-team": "kernels"}).next_turn(conversation())
    (request,) = server.requests
    assert request.json["top_k"] == 20 and request.headers["x-team"] == "kernels"


def test_a_reply_without_choices_is_retryable(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(Reply(body={"error": {"message": "model is loading"}}))
    with pytest.raises(ProviderError) as info:
        openai(server, monkeypatch).next_turn(conversation())
    assert info.value.retryable and "without choices" in str(info.value) and "model is loading" in str(info.value)


@pytest.mark.parametrize("make", [openai, anthropic], ids=["openai", "anthropic"])
def test_an_answer_that_is_not_json_is_retryable(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch,
                                                 make) -> None:
    server.push(Reply(body="<html>502 from a proxy</html>"))  # sent as application/json
    with pytest.raises(ProviderError) as info:
        make(server, monkeypatch).next_turn(conversation())
    assert info.value.retryable and info.value.status is None and "not JSON" in str(info.value)


# -- OpenAI-compatible: the SDK's retries, our verdict -----------------------------------------------------------


def test_429_then_success_is_retried_by_the_sdk(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(error_reply(429, "slow down", retry_after_ms=300), chat_completion("ok"))
    provider = openai(server, monkeypatch, max_retries=2)
    started = time.monotonic()
    assert provider.next_turn(conversation()).text == "ok"
    assert time.monotonic() - started >= 0.3  # the server's retry-after-ms was honoured
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1"]
    assert server.requests[0].json == server.requests[1].json  # the same request, sent again


def test_500_exhausted_is_a_retryable_error(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(*[error_reply(500, "boom", retry_after_ms=1)] * 3, chat_completion("never reached"))
    provider = openai(server, monkeypatch, max_retries=2)
    with pytest.raises(ProviderError) as info:
        provider.next_turn(conversation())
    assert info.value.retryable and info.value.status == 500
    assert str(info.value) == "openai: gave up after 3 attempts: HTTP 500: boom"
    assert len(server.requests) == 3 and server.pending == 1


def test_server_saying_do_not_retry_is_obeyed(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    reply = error_reply(503, "quota exhausted for today")
    reply.headers["x-should-retry"] = "false"
    server.push(reply, chat_completion("never reached"))
    with pytest.raises(ProviderError) as info:
        openai(server, monkeypatch, max_retries=3).next_turn(conversation())
    assert not info.value.retryable and info.value.status == 503 and len(server.requests) == 1


def test_401_is_fatal_and_the_key_never_shows(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # The server echoes the key back, as some do; it must not reach the error or the repr.
    server.push(error_reply(401, f"Incorrect API key provided: {OPENAI_KEY}", kind="invalid_api_key"),
                chat_completion("never reached"))
    provider = openai(server, monkeypatch, max_retries=3)
    with pytest.raises(ProviderError) as info:
        provider.next_turn(conversation())
    assert not info.value.retryable and info.value.status == 401
    assert "HTTP 401: invalid_api_key: Incorrect API key provided" in str(info.value)
    assert_no_secret(info.value, provider, OPENAI_KEY)
    assert OPENAI_KEY not in repr(provider.client)
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [400, 403, 404, 422])
def test_client_errors_are_not_retried(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch, status: int) -> None:
    server.push(error_reply(status, "context too long"), chat_completion("never reached"))
    with pytest.raises(ProviderError) as info:
        openai(server, monkeypatch, max_retries=3).next_turn(conversation())
    assert info.value.status == status and not info.value.retryable and "context too long" in str(info.value)
    assert len(server.requests) == 1


def test_connection_refused_is_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    provider = make_provider("vllm", "m", max_retries=1)
    with pytest.raises(ProviderError) as info:
        provider.next_turn(conversation())
    assert info.value.retryable and info.value.status is None
    assert "cannot reach the server" in str(info.value) and "ConnectError" in str(info.value)
    assert "2 attempts" in str(info.value)


def test_a_slow_answer_times_out_as_retryable(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(Reply(delay_s=5.0, body=chat_completion("late").body))
    provider = openai(server, monkeypatch, timeout_s=0.3, max_retries=0)
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        provider.next_turn(conversation())
    assert time.monotonic() - started < 3.0  # abandoned, not awaited
    assert info.value.retryable and info.value.status is None and "timed out" in str(info.value)


def test_a_dropped_connection_is_retried(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(Reply(drop=True), chat_completion("ok"))
    assert openai(server, monkeypatch, max_retries=1).next_turn(conversation()).text == "ok"
    assert len(server.requests) == 2


# -- OpenAI-compatible: configuration ----------------------------------------------------------------------------


def test_sdk_retries_and_timeouts_are_set_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    provider = make_provider("openai", None, max_retries=4, timeout_s=42.0)
    assert provider.client.max_retries == 4
    assert provider.client.timeout.read == 42.0 and provider.client.timeout.connect == 30.0
    assert provider.model == "gpt-4.1" and provider.base_url == "https://api.openai.com/v1"
    assert "max_completion_tokens" in provider.request_body(conversation())  # OpenAI's own API
    default = make_provider("openai", None)
    assert default.client.max_retries == 5 and default.client.timeout.read == 300.0
    for bad in ({"max_retries": -1}, {"timeout_s": 0}, {"base_url": "ftp://host/v1"}, {"base_url": "localhost:8000"}):
        with pytest.raises(ProviderConfigError):
            make_provider("openai", None, **bad)


def test_local_flavours_need_no_key_and_read_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    ollama = make_provider("ollama", "qwen3:8b")
    assert ollama.name == "ollama" and ollama.base_url == "http://127.0.0.1:11434/v1"
    assert str(ollama.client.base_url).rstrip("/") == "http://127.0.0.1:11434/v1"
    assert make_provider("llama.cpp", None).base_url == "http://127.0.0.1:8080/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://gpu-box:9000/v1/")
    vllm = make_provider("vllm", "m")
    assert vllm.base_url == "http://gpu-box:9000/v1" and str(vllm.client.base_url) == "http://gpu-box:9000/v1/"


def test_prices_from_environment(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARATHON_PRICE_IN", "1.5")
    monkeypatch.setenv("MARATHON_PRICE_OUT", "6")
    server.push(chat_completion("x", prompt_tokens=1000, completion_tokens=100))
    turn = openai(server, monkeypatch).next_turn(conversation())
    assert turn.usage.cost_usd == pytest.approx((1000 * 1.5 + 100 * 6) / 1e6)
    monkeypatch.setenv("MARATHON_PRICE_OUT", "cheap")
    with pytest.raises(ProviderConfigError, match="MARATHON_PRICE_OUT"):
        openai(server, monkeypatch)


# -- Anthropic ---------------------------------------------------------------------------------------------------


def test_anthropic_round_trip_merges_tool_results(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARATHON_MODEL", "claude-test")
    server.push(anthropic_message("Trying a bigger block.", [("toolu_1", "compile", {"source": "z"})],
                                  input_tokens=100, output_tokens=20,
                                  usage_extra={"cache_read_input_tokens": 1000, "cache_creation_input_tokens": 40}))
    provider = anthropic(server, monkeypatch, price_in=10.0, price_out=50.0)
    turn = provider.next_turn(conversation())

    assert turn.text == "Trying a bigger block."
    assert turn.tool_calls == (ToolCall("toolu_1", "compile", {"source": "z"}),)
    assert turn.stop_reason == "tool_use" and turn.model == "fake-claude"
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (1140, 20)
    assert turn.usage.cost_usd == pytest.approx((100 + 1.25 * 40 + 0.1 * 1000) * 10 / 1e6 + 20 * 50 / 1e6)

    (request,) = server.requests
    assert request.path == "/v1/messages"
    # Which header carries the key, and which API version, is the SDK's business; that the key goes is ours.
    assert ANTHROPIC_KEY in (request.headers.get("x-api-key"), request.headers.get("authorization", "")[7:])
    assert request.headers["anthropic-version"]
    body = request.json
    assert body["model"] == "claude-test" and body["max_tokens"] == 1234
    assert body["system"] == "You optimise kernels."
    assert body["tools"][1] == {"name": "profile", "description": "Time a kernel", "input_schema": {
        "type": "object", "properties": {}}}
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"] == [{"type": "text", "text": "Make softmax fast."}]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Compiling and timing."},
        {"type": "tool_use", "id": "call_a", "name": "compile", "input": {"source": "x = 1"}},
        {"type": "tool_use", "id": "call_b", "name": "profile", "input": {}},
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_a", "content": "compiled ok"},
        {"type": "tool_result", "tool_use_id": "call_b", "content": "profile crashed", "is_error": True},
        {"type": "text", "text": "Budget: 3 hours left."},
    ]


def test_anthropic_reads_only_text_and_tool_use_blocks(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.push(Reply(body={"id": "m", "type": "message", "role": "assistant", "model": "c", "stop_reason": "end_turn",
                            "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                        {"type": "text", "text": "First."}, {"type": "novel_block", "x": 1},
                                        {"type": "text", "text": "Second."}],
                            "usage": {"input_tokens": 3, "output_tokens": 2}}))
    context = conversation()
    context.max_output_tokens = 100_000  # the SDK refuses this without an explicit timeout: we always set one
    turn = anthropic(server, monkeypatch).next_turn(context)
    assert server.requests[0].json["max_tokens"] == 100_000
    assert turn.text == "First.\nSecond." and turn.tool_calls == () and turn.stop_reason == "end_turn"
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (3, 2)


def test_anthropic_prompt_cache_marks_breakpoints(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(anthropic_message("done"))
    turn = anthropic(server, monkeypatch, prompt_cache=True).next_turn(conversation())
    assert turn.stop_reason == "end_turn" and turn.tool_calls == ()
    body = server.requests[0].json
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["messages"][0]["content"][-1]


def test_anthropic_overloaded_is_retried_bad_request_is_not(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.push(error_reply(529, "Overloaded", kind="overloaded_error", anthropic=True, retry_after_ms=10),
                anthropic_message("ok"),
                error_reply(400, "prompt is too long", kind="invalid_request_error", anthropic=True))
    provider = anthropic(server, monkeypatch, max_retries=2)
    assert provider.next_turn(conversation()).text == "ok"
    assert len(server.requests) == 2
    with pytest.raises(ProviderError) as info:
        provider.next_turn(conversation())
    assert not info.value.retryable and info.value.status == 400
    assert str(info.value) == "anthropic: HTTP 400: invalid_request_error: prompt is too long"
    assert len(server.requests) == 3


def test_anthropic_500_exhausted_401_fatal(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(*[error_reply(500, "internal", kind="api_error", anthropic=True, retry_after_ms=1)] * 2,
                error_reply(401, f"invalid x-api-key {ANTHROPIC_KEY}", kind="authentication_error", anthropic=True),
                anthropic_message("never reached"))
    provider = anthropic(server, monkeypatch, max_retries=1)
    with pytest.raises(ProviderError) as exhausted:
        provider.next_turn(conversation())
    assert exhausted.value.retryable and exhausted.value.status == 500
    assert str(exhausted.value) == "anthropic: gave up after 2 attempts: HTTP 500: api_error: internal"
    with pytest.raises(ProviderError) as fatal:
        provider.next_turn(conversation())
    assert not fatal.value.retryable and fatal.value.status == 401
    assert "authentication_error: invalid x-api-key [redacted]" in str(fatal.value)
    assert_no_secret(fatal.value, provider, ANTHROPIC_KEY)
    assert len(server.requests) == 3 and server.pending == 1


def test_anthropic_connection_refused_is_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    provider = make_provider("anthropic", None, base_url=f"http://127.0.0.1:{closed_port()}", max_retries=0)
    assert provider.client.max_retries == 0
    with pytest.raises(ProviderError) as info:
        provider.next_turn(conversation())
    assert info.value.retryable and info.value.status is None and "ConnectError" in str(info.value)


# -- error texts -------------------------------------------------------------------------------------------------


def test_api_message_shapes_and_scrubbing() -> None:
    assert api_message({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, "-") == \
        "overloaded_error: busy"  # Anthropic: the whole body
    assert api_message({"type": "error", "message": "boom", "code": None}, "-") == "boom"  # OpenAI: the error member
    assert api_message({"error": "model not found"}, "-") == "model not found"  # Ollama
    assert api_message({"detail": "Not Found"}, "-") == "Not Found"  # FastAPI
    assert api_message("<html>bad gateway</html>", "-") == "<html>bad gateway</html>"
    assert api_message(None, "fallback") == "fallback"
    assert scrub("key sk-abc123456789 and secret-xyz", ["secret-xyz"]) == "key sk-[redacted] and [redacted]"


# -- factory -----------------------------------------------------------------------------------------------------


def test_unknown_provider_lists_valid_names() -> None:
    with pytest.raises(ProviderConfigError) as info:
        make_provider("gemini", None)
    for name in ("anthropic", "openai", "vllm", "ollama", "llamacpp", "scripted", "tuner"):
        assert name in str(info.value)
        assert name in provider_names()


def test_missing_keys_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ProviderConfigError, match="ANTHROPIC_API_KEY"):
        make_provider("anthropic", None)
    with pytest.raises(ProviderConfigError, match="OPENAI_API_KEY"):
        make_provider("openai", None)  # api.openai.com: a key is required
    with pytest.raises(ProviderConfigError, match="MARATHON_MODEL"):
        make_provider("vllm", None)  # a vLLM server needs the served model name
    monkeypatch.setenv("MARATHON_MODEL", "claude-from-env")
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    assert make_provider("Anthropic", None).model == "claude-from-env"
    assert make_provider("anthropic", "claude-arg").model == "claude-arg"


def test_tuner_is_imported_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "client.tuner", None)  # makes the import fail
    with pytest.raises(ProviderConfigError, match=r"client\.tuner"):
        make_provider("tuner", None)

    class TunerPolicy:
        name = "tuner"

        def __init__(self, **options: object) -> None:
            self.options = options

    monkeypatch.setitem(sys.modules, "client.tuner", types.SimpleNamespace(TunerPolicy=TunerPolicy))
    policy = make_provider("tuner", None, seed=3)
    assert isinstance(policy, TunerPolicy) and policy.options == {"seed": 3}


# -- scripted policy and the fake server itself ------------------------------------------------------------------


def test_scripted_policy_plays_turns_and_records_contexts() -> None:
    first = Turn("compile", (ToolCall("1", "compile", {}),))
    policy = make_provider("scripted", None, turns=[first, ProviderError("rate limited"), Turn("done", ())])
    context = conversation()
    assert policy.next_turn(context) is first
    context.messages.append(Message("assistant", "later"))  # the recorded snapshot must not change
    with pytest.raises(ProviderError):
        policy.next_turn(context)
    assert policy.next_turn(context).text == "done"
    with pytest.raises(RuntimeError, match="ran out"):
        policy.next_turn(context)
    assert len(policy.contexts) == 4
    assert len(policy.contexts[0].messages) == 5 and len(policy.contexts[1].messages) == 6

    echo = ScriptedPolicy(lambda ctx: Turn(f"{len(ctx.messages)} messages"))
    assert echo.next_turn(context).text == "6 messages" and echo.contexts[0].system == context.system
    assert ScriptedPolicy([], exhausted="stop").next_turn(context).tool_calls == ()


def test_fake_server_stops_by_itself() -> None:
    fake = FakeModelServer(max_lifetime_s=0.2).start()
    port = int(fake.url.rsplit(":", 1)[1])
    assert httpx.post(fake.url + "/v1/chat/completions", json={}).status_code == 418  # queue empty
    assert fake.stopped.wait(5.0)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
