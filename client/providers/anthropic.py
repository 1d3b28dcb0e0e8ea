"""Claude through the Messages API, on the official `anthropic` SDK.

The SDK owns the wire: authentication headers, the API version, retries with backoff and
Retry-After, timeouts. This module only converts the conversation into content blocks and back,
and turns the SDK's exceptions into ProviderError (see client.providers.errors).

The conversation is rebuilt on every turn. The API wants the results of one assistant turn's tool
calls together in the next user message, before any text, so consecutive tool results (and a user
note that follows them) are merged into one user message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import anthropic

from client.policy import Message, ToolCall, ToolSpec, Turn, TurnContext, Usage
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

BASE_URL_ENV = "ANTHROPIC_BASE_URL"
KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-5"

# Cache writes cost 1.25x the input price, cache reads 0.1x (Anthropic's published multipliers).
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1

SDK_ERRORS = SdkErrors(anthropic.APIError, anthropic.APIStatusError, anthropic.APIConnectionError,
                       anthropic.APITimeoutError)


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


def parse_content(content: Iterable[Any] | None) -> tuple[str, tuple[ToolCall, ...]]:
    """(text of the text blocks, tool_use blocks as calls) of the SDK's content blocks.

    Other block types (thinking, server tools, types newer than the SDK) are skipped.
    """
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content or ():
        kind = getattr(block, "type", None)
        if kind == "text" and isinstance(getattr(block, "text", None), str):
            texts.append(block.text)
        elif kind == "tool_use":
            raw = getattr(block, "input", None)
            arguments = raw if isinstance(raw, dict) else {"_raw": json.dumps(raw)}
            calls.append(ToolCall(id=str(getattr(block, "id", "") or ""), name=str(getattr(block, "name", "") or ""),
                                  arguments=arguments))
    return "\n".join(t for t in texts if t), tuple(calls)


def _tokens(usage: Any, field: str) -> int:
    return int(getattr(usage, field, None) or 0)


class AnthropicProvider:
    """A Policy backed by Claude. Options: base_url, max_retries, timeout_s, prices, temperature,
    prompt_cache, extra_body (merged into each request), extra_headers (sent with each request)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        price_in: float | str | None = None,
        price_out: float | str | None = None,
        temperature: float | None = None,
        prompt_cache: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.name = "anthropic"
        self.model = resolve_model(model, DEFAULT_MODEL, self.name)
        key = require_key(KEY_ENV, self.name)
        check_retry_options(max_retries, timeout_s, self.name)
        self.base_url = check_base_url(base_url or env_str(BASE_URL_ENV) or DEFAULT_BASE_URL, self.name)
        self.prices = Prices.resolve(price_in, price_out)
        self.temperature = temperature
        self.prompt_cache = prompt_cache
        self.extra_body = dict(extra_body or {})
        self._secrets = (key,)
        # Every setting is passed explicitly, so the SDK reads no credentials or URLs of its own.
        self.client = anthropic.Anthropic(
            api_key=key,
            base_url=self.base_url,
            max_retries=max_retries,
            timeout=anthropic.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S)),
            default_headers=dict(extra_headers or {}),
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        self.client.close()

    def request_body(self, context: TurnContext) -> dict[str, Any]:
        """The arguments of messages.create for this turn (extra_body is added by the SDK on top)."""
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
        return body

    def next_turn(self, context: TurnContext) -> Turn:
        body = self.request_body(context)
        try:
            reply = self.client.messages.create(**body, extra_body=self.extra_body or None)
        except SDK_ERRORS.caught as exc:
            raise to_provider_error(exc, SDK_ERRORS, self.name, self._secrets) from None
        text, calls = parse_content(getattr(reply, "content", None))
        usage = getattr(reply, "usage", None)
        plain = _tokens(usage, "input_tokens")
        written = _tokens(usage, "cache_creation_input_tokens")
        read = _tokens(usage, "cache_read_input_tokens")
        tokens_out = _tokens(usage, "output_tokens")
        billed_in = plain + CACHE_WRITE_FACTOR * written + CACHE_READ_FACTOR * read
        return Turn(
            text=text,
            tool_calls=calls,
            # input_tokens counts the whole prompt, cached or not, so context size is read off it.
            usage=Usage(plain + written + read, tokens_out, self.prices.cost(billed_in, tokens_out)),
            stop_reason=str(getattr(reply, "stop_reason", None) or ("tool_use" if calls else "end_turn")),
            model=str(getattr(reply, "model", None) or self.model),
        )
