"""Chat Completions on the official `openai` SDK: OpenAI, and the servers that copy its API (vLLM,
llama.cpp, Ollama).

The SDK owns the wire: authentication, retries with backoff and Retry-After, timeouts. This module
only converts the conversation into the Chat Completions shape and back, and turns the SDK's
exceptions into ProviderError (see client.providers.errors).

The conversation is rebuilt on every turn (system first, assistant tool calls with JSON-string
arguments, one "tool" message per result). Replies are read leniently, because local servers bend
the format: a tool call without an id gets one, arguments sent as an object are taken as they are,
and arguments a model wrote as broken JSON are kept as {"_raw": text} rather than dropped, so the
loop can show the model what it sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import openai

from client.policy import Message, ProviderError, ToolCall, ToolSpec, Turn, TurnContext, Usage
from client.providers.config import (
    CONNECT_TIMEOUT_S,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    Prices,
    check_retry_options,
    env_str,
    require_key,
    resolve_model,
)
from client.providers.errors import SdkErrors, check_base_url, to_provider_error

BASE_URL_ENV = "OPENAI_BASE_URL"
KEY_ENV = "OPENAI_API_KEY"
OPENAI_URL = "https://api.openai.com/v1"

# flavour -> (default base URL when $OPENAI_BASE_URL is unset, default model or None: must be given)
FLAVOURS: dict[str, tuple[str, str | None]] = {
    "openai": (OPENAI_URL, "gpt-4.1"),
    "vllm": ("http://127.0.0.1:8000/v1", None),
    "ollama": ("http://127.0.0.1:11434/v1", None),
    # llama.cpp's server answers with whatever model it loaded, whatever the name.
    "llamacpp": ("http://127.0.0.1:8080/v1", "local"),
}

_STOP_REASONS = {"tool_calls": "tool_use", "function_call": "tool_use", "stop": "end_turn",
                 "length": "max_tokens", "content_filter": "refusal"}

# The SDK insists on a key; a local server without one is sent this, with the header then omitted.
_NO_KEY = "no-key"

SDK_ERRORS = SdkErrors(openai.APIError, openai.APIStatusError, openai.APIConnectionError, openai.APITimeoutError)


def to_openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.role == "user":
            out.append({"role": "user", "content": m.content})
        elif m.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name, "arguments": _arguments_text(c.arguments)}}
                    for c in m.tool_calls
                ]
            out.append(entry)
        elif m.role == "tool":
            if not m.tool_call_id:
                raise ValueError("a tool message needs the tool_call_id it answers")
            # Chat Completions has no error flag on tool results: say it in the text.
            content = f"[tool error] {m.content}" if m.is_error else m.content
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": content})
        else:
            raise ValueError(f"unknown message role {m.role!r}")
    return out


def _arguments_text(arguments: Mapping[str, Any]) -> str:
    # A call that came back unparseable is sent back as the model wrote it.
    if set(arguments) == {"_raw"} and isinstance(arguments["_raw"], str):
        return arguments["_raw"]
    return json.dumps(arguments)


def to_openai_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [{"type": "function",
             "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
            for t in tools]


def parse_arguments(raw: Any) -> dict[str, Any]:
    """A call's arguments as a dict; anything that is not a JSON object comes back as {"_raw": text}."""
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    text = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # some servers answer with content parts
        parts = (p.get("text") if isinstance(p, dict) else getattr(p, "text", None) for p in content)
        return "".join(t for t in parts if isinstance(t, str))
    return str(content)


def parse_choice(completion: Any) -> tuple[str, tuple[ToolCall, ...], str]:
    """(text, tool calls, stop reason in the Anthropic vocabulary the loop uses) of the SDK's choices[0]."""
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        said = getattr(completion, "error", None)  # some servers answer 200 with an error object
        detail = f": {json.dumps(said, default=str)[:300]}" if said else ""
        raise ProviderError(f"response without choices{detail}", retryable=True)
    choice = choices[0]
    message = getattr(choice, "message", None)
    calls = []
    for i, raw in enumerate(getattr(message, "tool_calls", None) or []):
        function = getattr(raw, "function", None)
        call_id = getattr(raw, "id", None) or f"call_{i}_{uuid.uuid4().hex[:8]}"  # some local servers send none
        calls.append(ToolCall(id=str(call_id), name=str(getattr(function, "name", None) or ""),
                              arguments=parse_arguments(getattr(function, "arguments", None))))
    finish = getattr(choice, "finish_reason", None) or "stop"
    # Ollama and others say "stop" even when the reply is tool calls.
    stop = "tool_use" if calls else _STOP_REASONS.get(finish, finish)
    return _content_text(getattr(message, "content", None)), tuple(calls), stop


class OpenAICompatProvider:
    """A Policy backed by a Chat Completions endpoint ({base_url}/chat/completions). Options: flavour,
    base_url, max_retries, timeout_s, prices, temperature, max_tokens_field, extra_body, extra_headers."""

    def __init__(
        self,
        model: str | None = None,
        *,
        flavour: str = "openai",
        base_url: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        price_in: float | str | None = None,
        price_out: float | str | None = None,
        temperature: float | None = None,
        max_tokens_field: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"unknown flavour {flavour!r}; one of {sorted(FLAVOURS)}")
        default_url, default_model = FLAVOURS[flavour]
        self.name = flavour
        self.model = resolve_model(model, default_model, flavour)
        check_retry_options(max_retries, timeout_s, flavour)
        self.base_url = check_base_url(base_url or env_str(BASE_URL_ENV) or default_url, flavour)
        # The key is optional for local servers; OpenAI's own API refuses every call without one.
        official = urlparse(self.base_url).hostname == urlparse(OPENAI_URL).hostname
        key = env_str(KEY_ENV)
        if key is None and official:
            key = require_key(KEY_ENV, flavour)
        self.prices = Prices.resolve(price_in, price_out)
        self.temperature = temperature
        # OpenAI's newer models take only max_completion_tokens; the local servers know max_tokens.
        self.max_tokens_field = max_tokens_field or (
            "max_completion_tokens" if official else "max_tokens")
        self.extra_body = dict(extra_body or {})
        self._secrets = (key,) if key else ()
        # Without a key, no Authorization header at all: a placeholder could be taken for a bad key.
        self._request_headers: dict[str, Any] = {} if key else {"Authorization": openai.Omit()}
        # Every setting is passed explicitly, so the SDK reads no key or URL of its own.
        self.client = openai.OpenAI(
            api_key=key or _NO_KEY,
            base_url=self.base_url,
            max_retries=max_retries,
            timeout=openai.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S)),
            default_headers=dict(extra_headers or {}),
        )

    def __repr__(self) -> str:
        return f"OpenAICompatProvider(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        self.client.close()

    def request_body(self, context: TurnContext) -> dict[str, Any]:
        """The arguments of chat.completions.create for this turn (extra_body is added by the SDK on top)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(context.system, context.messages),
            self.max_tokens_field: context.max_output_tokens,
        }
        if context.tools:
            body["tools"] = to_openai_tools(context.tools)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def next_turn(self, context: TurnContext) -> Turn:
        body = self.request_body(context)
        try:
            completion = self.client.chat.completions.create(
                **body, extra_body=self.extra_body or None, extra_headers=self._request_headers or None)
        except SDK_ERRORS.caught as exc:
            raise to_provider_error(exc, SDK_ERRORS, self.name, self._secrets) from None
        try:
            text, calls, stop = parse_choice(completion)
        except ProviderError as exc:
            raise ProviderError(f"{self.name}: {exc}", retryable=exc.retryable) from None
        usage = getattr(completion, "usage", None)
        tokens_in = int(getattr(usage, "prompt_tokens", None) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", None) or 0)
        return Turn(
            text=text,
            tool_calls=calls,
            usage=Usage(tokens_in, tokens_out, self.prices.cost(tokens_in, tokens_out)),
            stop_reason=stop,
            model=str(getattr(completion, "model", None) or self.model),
        )
