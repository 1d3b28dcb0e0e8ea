"""Policies by name: `make_provider("anthropic" | "openai" | "vllm" | ... , model, **options)`.

The loop and the CLI name a policy with one string; this registry turns it into an object with the
Policy interface. Implementations are imported only when asked for, so naming one does not pay for
the others (or for the anthropic and openai SDKs). Other modules may add their own with `register`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from client.policy import Policy
from client.providers.config import ProviderConfigError

Factory = Callable[..., Policy]
"""factory(model, **options) -> Policy"""

_REGISTRY: dict[str, Factory] = {}


def _key(name: str) -> str:
    # "llama.cpp", "llama-cpp" and "LlamaCpp" all mean llamacpp.
    return "".join(ch for ch in name.strip().lower() if ch not in "-_. ")


def register(name: str, factory: Factory) -> None:
    """Make `factory` available as `name` (replacing any earlier one of that name)."""
    _REGISTRY[_key(name)] = factory


def provider_names() -> list[str]:
    return sorted(_REGISTRY)


def make_provider(name: str, model: str | None = None, **options: Any) -> Policy:
    """The policy registered as `name`. ProviderConfigError for unknown names, missing keys and the like."""
    factory = _REGISTRY.get(_key(name))
    if factory is None:
        raise ProviderConfigError(f"unknown provider {name!r}; valid: {', '.join(provider_names())}")
    return factory(model, **options)


def _anthropic(model: str | None, **options: Any) -> Policy:
    from client.providers.anthropic import AnthropicProvider

    return AnthropicProvider(model, **options)


def _openai_like(flavour: str) -> Factory:
    def build(model: str | None, **options: Any) -> Policy:
        from client.providers.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider(model, flavour=flavour, **options)

    return build


def _scripted(model: str | None, **options: Any) -> Policy:
    from client.providers.scripted import ScriptedPolicy

    if "turns" not in options:
        raise ProviderConfigError("provider 'scripted' needs turns=[Turn, ...] or turns=callable(context)")
    return ScriptedPolicy(**options)


def _tuner(model: str | None, **options: Any) -> Policy:
    # The tuner is model-free: `model` is ignored, options go to TunerPolicy as they are.
    try:
        from client.tuner import TunerPolicy
    except ImportError as exc:
        raise ProviderConfigError(
            f"provider 'tuner' needs client.tuner.TunerPolicy, which could not be imported: {exc}"
        ) from exc
    policy: Policy = TunerPolicy(**options)
    return policy


register("anthropic", _anthropic)
for _flavour in ("openai", "vllm", "ollama", "llamacpp"):
    register(_flavour, _openai_like(_flavour))
register("scripted", _scripted)
register("tuner", _tuner)

__all__ = ["Factory", "ProviderConfigError", "make_provider", "provider_names", "register"]
