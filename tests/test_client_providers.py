"""Model providers against a real local HTTP server: request shapes, parsing, retries, key hygiene."""

from __future__ import annotations

import json
import socket
import sys
import time
import types
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import httpx
import pytest

from client.policy import Message, ProviderError, ToolCall, ToolSpec, Turn, TurnContext
from client.providers import ProviderConfigError, make_provider, provider_names
from client.providers.fake_openai_server import (
    FakeModelServer,
    Reply,
    anthropic_message,
    chat_completion,
    error_reply,
)
from client.providers.http import RetryPolicy, parse_retry_after
from client.providers.scripted import ScriptedPolicy

OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-9876543210fedcba"
TOOLS = [ToolSpec("compile", "Compile a kernel", {"type": "object", "properties": {"source": {"type": "string"}}}),
         ToolSpec("profile", "Time a kernel", {"type": "object", "properties": {}})]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MARATHON_MODEL",
                 "MARATHON_PRICE_IN", "MARATHON_PRICE_OUT", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                 "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
    with FakeModelServer(max_lifetime_s=30) as fake:
        yield fake


class Sleeps(list):
    """An injected sleep: records the delays instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


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
    options.setdefault("sleep", Sleeps())
    return make_provider("openai", "test-model", **options)


# -- OpenAI-compatible ------------------------------------------------------------------------------------------


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
    body = request.json
    assert body["model"] == "test-model"
    assert body["max_tokens"] == 1234
    assert body["tools"][0] == {"type": "function", "function": {
        "name": "compile", "description": "Compile a kernel", "parameters": TOOLS[0].input_schema}}
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user"]
    assistant = body["messages"][2]
    assert assistant["content"] == "Compiling and timing."
    assert assistant["tool_calls"][0] == {"id": "call_a", "type": "function",
                                          "function": {"name": "compile", "arguments": '{"source": "x = 1"}'}}
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {}
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "call_a", "content": "compiled ok"}
    assert body["messages"][4]["tool_call_id"] == "call_b"
    assert "error" in body["messages"][4]["content"] and "profile crashed" in body["messages"][4]["content"]


def test_openai_plain_answer_ends_the_turn(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(chat_completion("All done."))
    turn = openai(server, monkeypatch).next_turn(conversation())
    assert turn.tool_calls == () and turn.stop_reason == "end_turn" and turn.text == "All done."
    assert turn.usage.cost_usd == 0.0  # no prices known


def test_retries_429_and_500_honouring_retry_after(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(error_reply(429, "slow down", retry_after="7"), error_reply(500, "boom"), chat_completion("ok"))
    sleeps = Sleeps()
    seen: list[tuple[int, float, str]] = []
    provider = openai(server, monkeypatch, sleep=sleeps, rand=lambda: 0.5,
                      on_retry=lambda attempt, delay, why: seen.append((attempt, delay, why)))
    assert provider.next_turn(conversation()).text == "ok"
    assert len(server.requests) == 3
    assert sleeps[0] == 7.0  # the server's Retry-After, not our backoff
    assert 1.0 <= sleeps[1] <= 4.0  # second attempt: backoff ceiling 4 s, equal jitter
    assert [s[0] for s in seen] == [1, 2] and "429" in seen[0][2] and "slow down" in seen[0][2]


def test_retry_after_is_capped(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(error_reply(429, "daily limit", retry_after="86400"), chat_completion("ok"))
    sleeps = Sleeps()
    provider = openai(server, monkeypatch, sleep=sleeps, retry=RetryPolicy(retry_after_max_s=30.0))
    provider.next_turn(conversation())
    assert sleeps == [30.0]


def test_dropped_connection_and_timeout_are_retried(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(Reply(drop=True), Reply(delay_s=2.0, body=chat_completion("late").body), chat_completion("ok"))
    sleeps = Sleeps()
    provider = openai(server, monkeypatch, sleep=sleeps, timeout_s=0.3)
    started = time.monotonic()
    assert provider.next_turn(conversation()).text == "ok"
    assert time.monotonic() - started < 2.0  # the slow answer was abandoned, not awaited
    assert len(server.requests) == 3 and len(sleeps) == 2


def test_gives_up_after_max_attempts(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.push(*[error_reply(503, "overloaded")] * 3, chat_completion("never reached"))
    sleeps = Sleeps()
    provider = openai(server, monkeypatch, sleep=sleeps, max_attempts=3)
    with pytest.raises(ProviderError) as info:
        provider.next_turn(conversation())
    assert info.value.retryable and info.value.status == 503
    assert "3 attempts" in str(info.value) and "overloaded" in str(info.value)
    assert len(server.requests) == 3 and len(sleeps) == 2
    assert all(0 < s <= 60 for s in sleeps)


def test_401_is_not_retried_and_the_key_never_shows(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # The server echoes the key back, as some do; it must not reach the error, the repr or the retry hook.
    server.push(error_reply(401, f"Incorrect API key provided: {OPENAI_KEY}", kind="invalid_api_key"),
                chat_completion("never reached"))
    sleeps = Sleeps()
    provider = openai(server, monkeypatch, sleep=sleeps)
    with pytest.raises(ProviderError) as info:
        provider.next_turn(conversation())
    assert not info.value.retryable and info.value.status == 401
    assert "Incorrect API key provided" in str(info.value)
    assert OPENAI_KEY not in str(info.value) and OPENAI_KEY not in repr(info.value)
    assert OPENAI_KEY not in repr(provider) and OPENAI_KEY not in repr(provider.http)
    assert len(server.requests) == 1 and sleeps == []


@pytest.mark.parametrize("status", [400, 403, 404])
def test_client_errors_are_not_retried(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch, status: int) -> None:
    server.push(error_reply(status, "context too long"))
    with pytest.raises(ProviderError) as info:
        openai(server, monkeypatch).next_turn(conversation())
    assert info.value.status == status and not info.value.retryable and "context too long" in str(info.value)
    assert len(server.requests) == 1


def test_local_flavours_need_no_key_and_read_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    ollama = make_provider("ollama", "qwen3:8b")
    assert ollama.name == "ollama" and ollama.base_url == "http://127.0.0.1:11434/v1"
    assert "authorization" not in ollama.http._client.headers
    assert make_provider("llama.cpp", None).base_url == "http://127.0.0.1:8080/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://gpu-box:9000/v1/")
    assert make_provider("vllm", "m").base_url == "http://gpu-box:9000/v1"


def test_local_server_round_trip_without_key(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # Local servers may send no tool-call id and arguments as an object; both are accepted.
    server.push(Reply(body={"model": "m", "choices": [{"finish_reason": "stop", "message": {
        "content": None, "tool_calls": [{"function": {"name": "profile", "arguments": {"iters": 5}}}]}}]}))
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    turn = make_provider("vllm", "m", sleep=Sleeps()).next_turn(conversation())
    assert turn.tool_calls[0].name == "profile" and turn.tool_calls[0].arguments == {"iters": 5}
    assert turn.tool_calls[0].id and turn.stop_reason == "tool_use" and turn.usage.input_tokens == 0
    assert "authorization" not in server.requests[0].headers


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


def anthropic(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch, **options):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
    options.setdefault("sleep", Sleeps())
    return make_provider("anthropic", None, **options)


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
    assert request.headers["x-api-key"] == ANTHROPIC_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    body = request.json
    assert body["model"] == "claude-test" and body["max_tokens"] == 1234
    assert body["system"] == "You optimise kernels."
    assert body["tools"][1] == {"name": "profile", "description": "Time a kernel", "input_schema": {
        "type": "object", "properties": {}}}
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
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
    date = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=20), usegmt=True)
    server.push(error_reply(529, "Overloaded", kind="overloaded_error", anthropic=True, retry_after=date),
                anthropic_message("ok"),
                error_reply(400, "prompt is too long", kind="invalid_request_error", anthropic=True))
    sleeps = Sleeps()
    provider = anthropic(server, monkeypatch, sleep=sleeps)
    assert provider.next_turn(conversation()).text == "ok"
    assert len(sleeps) == 1 and 15 <= sleeps[0] <= 20  # the HTTP-date Retry-After
    with pytest.raises(ProviderError) as info:
        provider.next_turn(conversation())
    assert not info.value.retryable and info.value.status == 400
    assert "invalid_request_error: prompt is too long" in str(info.value)
    assert ANTHROPIC_KEY not in str(info.value) and ANTHROPIC_KEY not in repr(provider)
    assert len(server.requests) == 3


def test_parse_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_retry_after({"retry-after": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    date = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now.timestamp()) == pytest.approx(30.0)
    assert parse_retry_after({"retry-after": format_datetime(now, usegmt=True)}, now=now.timestamp() + 5) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


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
