"""What drives the loop: a policy that, given the context of a turn, returns the next turn.

Model providers (Anthropic, OpenAI-compatible) and model-free policies (the tuner, scripted runs for
tests) implement the same interface, so the loop, the log and the restart logic never ask which one
is driving. A provider sees the system prompt, the visible messages and the tools; a model-free
policy reads the structured pinned state (goal, best kernel, attempts) instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it (from the MCP server's tool list)."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Message:
    """One message of the visible conversation.

    user: `content` is text. assistant: `content` is its text, `tool_calls` what it asked for.
    tool: `content` is the result text for the call `tool_call_id` (`is_error` when the tool failed).
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class Turn:
    """What a policy returns: text, the tool calls to make next (none: the policy is done)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: str = "tool_use"
    model: str = ""


@dataclass
class TurnContext:
    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    pinned: dict[str, Any]
    max_output_tokens: int = 4096


class Policy(Protocol):
    name: str

    def next_turn(self, context: TurnContext) -> Turn:
        """The next turn. Raise ProviderError for failures the loop should log and retry later."""
        ...


class ProviderError(Exception):
    """A model call failed after the provider's own retries (rate limit, network, server error)."""

    def __init__(self, message: str, retryable: bool = True, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
