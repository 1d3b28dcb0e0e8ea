"""How a provider is configured: model name, API key, prices, and how hard its SDK tries one call.

Keys come only from the environment, so they never pass through command lines, options or logs;
a missing one is reported by the name of the variable to set.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

MODEL_ENV = "MARATHON_MODEL"
PRICE_IN_ENV = "MARATHON_PRICE_IN"
PRICE_OUT_ENV = "MARATHON_PRICE_OUT"


class ProviderConfigError(ValueError):
    """A provider cannot be built as asked (unknown name, missing key, bad option). Not retryable."""


def env_str(name: str) -> str | None:
    """The variable's value, or None when it is unset or blank."""
    value = os.environ.get(name, "").strip()
    return value or None


def resolve_model(model: str | None, default: str | None, provider: str) -> str:
    """The argument, else $MARATHON_MODEL, else the provider's default."""
    chosen = (model or "").strip() or env_str(MODEL_ENV) or default
    if not chosen:
        raise ProviderConfigError(
            f"{provider}: no model given: pass one (--model) or set {MODEL_ENV} "
            "(the name the server serves the model under)"
        )
    return chosen


def require_key(env_name: str, provider: str) -> str:
    key = env_str(env_name)
    if key is None:
        raise ProviderConfigError(f"{provider}: no API key: set {env_name} in the environment")
    return key


def _price(value: float | str | None, env_name: str) -> float:
    if value is None:
        value = env_str(env_name)
        if value is None:
            return 0.0
    try:
        price = float(value)
    except (TypeError, ValueError):
        raise ProviderConfigError(f"price must be a number of USD per million tokens, got {value!r} "
                                  f"(option or {env_name})") from None
    if not math.isfinite(price) or price < 0:
        raise ProviderConfigError(f"price must be a finite number >= 0, got {value!r} (option or {env_name})")
    return price


@dataclass(frozen=True)
class Prices:
    """USD per million tokens; zero where unknown, so cost is then reported as 0."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0

    @classmethod
    def resolve(cls, price_in: float | str | None = None, price_out: float | str | None = None) -> Prices:
        """Options first, then $MARATHON_PRICE_IN / $MARATHON_PRICE_OUT."""
        return cls(_price(price_in, PRICE_IN_ENV), _price(price_out, PRICE_OUT_ENV))

    def cost(self, input_tokens: float, output_tokens: float) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


# How hard the SDKs try one call before the loop sees a ProviderError: six attempts (their backoff
# grows from 0.5 s to 8 s, or follows Retry-After), each allowed five minutes for a long answer.
DEFAULT_MAX_RETRIES = 5
DEFAULT_TIMEOUT_S = 300.0
CONNECT_TIMEOUT_S = 30.0


def check_retry_options(max_retries: int, timeout_s: float, provider: str) -> None:
    if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
        raise ProviderConfigError(f"{provider}: max_retries must be an integer >= 0, got {max_retries!r}")
    if not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ProviderConfigError(f"{provider}: timeout_s must be a number of seconds > 0, got {timeout_s!r}")
