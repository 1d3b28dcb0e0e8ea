"""Chat Completions over HTTP: OpenAI, and the servers that copy its API (vLLM, llama.cpp, Ollama).

The conversation is rebuilt into the Chat Completions shape on every turn (system first, assistant
tool calls with JSON-string arguments, one "tool" message per result), and the reply is read back
into a Turn. Arguments a model wrote as broken JSON are kept as {"_raw": text} rather than
dropped, so the loop can show the model what it sent.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import httpx

from client.policy import Message, ProviderError, ToolCall, ToolSpec, Turn, TurnContext, Usage
from client.providers.config import Prices, env_str, require_key, resolve_model
from client.providers.http import JsonClient, RetryHook, RetryPolicy

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
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def parse_choice(data: Mapping[str, Any]) -> tuple[str, tuple[ToolCall, ...], str]:
    """(text, tool calls, stop reason in the Anthropic vocabulary the loop uses) of choices[0]."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        err = data.get("error")
        raise ProviderError(f"response without choices: {json.dumps(err or data)[:300]}", retryable=True)
    choice = choices[0]
    message = choice.get("message") or {}
    calls = []
    for i, raw in enumerate(message.get("tool_calls") or []):
        function = raw.get("function") or {}
        call_id = raw.get("id") or f"call_{i}_{uuid.uuid4().hex[:8]}"  # some local servers send none
        calls.append(ToolCall(id=call_id, name=function.get("name", ""),
                              arguments=parse_arguments(function.get("arguments"))))
    finish = choice.get("finish_reason") or "stop"
    # Ollama and others say "stop" even when the reply is tool calls.
    stop = "tool_use" if calls else _STOP_REASONS.get(finish, finish)
    return _content_text(message.get("content")), tuple(calls), stop


class OpenAICompatProvider:
    """A Policy backed by a Chat Completions endpoint (POST {base_url}/chat/completions)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        flavour: str = "openai",
        base_url: str | None = None,
        max_attempts: int = 6,
        timeout_s: float = 300.0,
        retry: RetryPolicy | None = None,
        price_in: float | str | None = None,
        price_out: float | str | None = None,
        temperature: float | None = None,
        max_tokens_field: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        extra_headers: Mapping[str, str] | None = None,
        sleep: Any = time.sleep,
        rand: Any = random.random,
        on_retry: RetryHook | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"unknown flavour {flavour!r}; one of {sorted(FLAVOURS)}")
        default_url, default_model = FLAVOURS[flavour]
        self.name = flavour
        self.model = resolve_model(model, default_model, flavour)
        self.base_url = (base_url or env_str(BASE_URL_ENV) or default_url).rstrip("/")
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
        headers = {"accept": "application/json", **(extra_headers or {})}
        if key:
            headers["authorization"] = f"Bearer {key}"
        self.http = JsonClient(flavour, self.base_url, headers,
                               retry or RetryPolicy(max_attempts=max_attempts, timeout_s=timeout_s),
                               secrets=(key,) if key else (), sleep=sleep, rand=rand, on_retry=on_retry,
                               transport=transport)

    def __repr__(self) -> str:
        return f"OpenAICompatProvider(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        self.http.close()

    def request_body(self, context: TurnContext) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(context.system, context.messages),
            self.max_tokens_field: context.max_output_tokens,
        }
        if context.tools:
            body["tools"] = to_openai_tools(context.tools)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        return body

    def next_turn(self, context: TurnContext) -> Turn:
        data = self.http.post("/chat/completions", self.request_body(context))
        try:
            text, calls, stop = parse_choice(data)
        except ProviderError as exc:
            raise ProviderError(f"{self.name}: {exc}", retryable=exc.retryable) from None
        usage = data.get("usage") or {}
        tokens_in = int(usage.get("prompt_tokens") or 0)
        tokens_out = int(usage.get("completion_tokens") or 0)
        return Turn(
            text=text,
            tool_calls=calls,
            usage=Usage(tokens_in, tokens_out, self.prices.cost(tokens_in, tokens_out)),
            stop_reason=stop,
            model=str(data.get("model") or self.model),
        )
