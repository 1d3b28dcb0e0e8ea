"""The Anthropic Messages API (POST {base_url}/v1/messages).

The conversation is rebuilt into content blocks on every turn. The API wants the results of one
assistant turn's tool calls together in the next user message, before any text, so consecutive
tool results (and a user note that follows them) are merged into one user message.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from typing import Any

import httpx

from client.policy import Message, ToolCall, ToolSpec, Turn, TurnContext, Usage
from client.providers.config import Prices, env_str, require_key, resolve_model
from client.providers.http import JsonClient, RetryHook, RetryPolicy

BASE_URL_ENV = "ANTHROPIC_BASE_URL"
KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-5"
API_VERSION = "2023-06-01"

# Cache writes cost 1.25x the input price, cache reads 0.1x (Anthropic's published multipliers).
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1


def _blocks(m: Message) -> tuple[str, list[dict[str, Any]]]:
    if m.role == "user":
        return "user", [{"type": "text", "text": m.content}] if m.content else []
    if m.role == "assistant":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                   for c in m.tool_calls]
        return "assistant", blocks
    if m.role == "tool":
        if not m.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id}
        if m.content:
            block["content"] = m.content
        if m.is_error:
            block["is_error"] = True
        return "user", [block]
    raise ValueError(f"unknown message role {m.role!r}")


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages as content blocks; same-role neighbours merged, tool results first in each user message."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role, blocks = _blocks(m)
        if not blocks:  # the API refuses empty text blocks and empty messages
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for entry in out:
        if entry["role"] == "user":
            entry["content"].sort(key=lambda b: b["type"] != "tool_result")  # stable
    return out


def to_anthropic_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools]


def parse_content(content: Any) -> tuple[str, tuple[ToolCall, ...]]:
    """(text of the text blocks, tool_use blocks as calls); other block types (thinking) are skipped."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content if isinstance(content, list) else []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            raw = block.get("input")
            arguments = raw if isinstance(raw, dict) else {"_raw": json.dumps(raw)}
            calls.append(ToolCall(id=str(block.get("id", "")), name=str(block.get("name", "")), arguments=arguments))
    return "\n".join(t for t in texts if t), tuple(calls)


class AnthropicProvider:
    """A Policy backed by Claude through the Messages API."""

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        max_attempts: int = 6,
        timeout_s: float = 300.0,
        retry: RetryPolicy | None = None,
        price_in: float | str | None = None,
        price_out: float | str | None = None,
        temperature: float | None = None,
        prompt_cache: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        extra_headers: Mapping[str, str] | None = None,
        sleep: Any = time.sleep,
        rand: Any = random.random,
        on_retry: RetryHook | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.name = "anthropic"
        self.model = resolve_model(model, DEFAULT_MODEL, self.name)
        key = require_key(KEY_ENV, self.name)
        self.base_url = (base_url or env_str(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
        self.prices = Prices.resolve(price_in, price_out)
        self.temperature = temperature
        self.prompt_cache = prompt_cache
        self.extra_body = dict(extra_body or {})
        headers = {"x-api-key": key, "anthropic-version": API_VERSION, "accept": "application/json",
                   **(extra_headers or {})}
        self.http = JsonClient(self.name, self.base_url, headers,
                               retry or RetryPolicy(max_attempts=max_attempts, timeout_s=timeout_s),
                               secrets=(key,), sleep=sleep, rand=rand, on_retry=on_retry, transport=transport)

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        self.http.close()

    def request_body(self, context: TurnContext) -> dict[str, Any]:
        messages = to_anthropic_messages(context.messages)
        body: dict[str, Any] = {"model": self.model, "max_tokens": context.max_output_tokens, "messages": messages}
        if context.system:
            body["system"] = context.system
        if context.tools:
            body["tools"] = to_anthropic_tools(context.tools)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.prompt_cache:
            # Breakpoints after the system prompt and after the newest block: the next turn reads the
            # whole prefix from the cache. Worth it only when the system prompt is stable across turns.
            if context.system:
                body["system"] = [{"type": "text", "text": context.system, "cache_control": {"type": "ephemeral"}}]
            if messages:
                messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        body.update(self.extra_body)
        return body

    def next_turn(self, context: TurnContext) -> Turn:
        data = self.http.post("/v1/messages", self.request_body(context))
        text, calls = parse_content(data.get("content"))
        usage = data.get("usage") or {}
        plain = int(usage.get("input_tokens") or 0)
        written = int(usage.get("cache_creation_input_tokens") or 0)
        read = int(usage.get("cache_read_input_tokens") or 0)
        tokens_out = int(usage.get("output_tokens") or 0)
        billed_in = plain + CACHE_WRITE_FACTOR * written + CACHE_READ_FACTOR * read
        return Turn(
            text=text,
            tool_calls=calls,
            # input_tokens counts the whole prompt, cached or not, so context size is read off it.
            usage=Usage(plain + written + read, tokens_out, self.prices.cost(billed_in, tokens_out)),
            stop_reason=str(data.get("stop_reason") or ("tool_use" if calls else "end_turn")),
            model=str(data.get("model") or self.model),
        )
