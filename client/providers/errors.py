"""SDK failures as the loop's ProviderError, with the SDK's own retries already spent.

The `anthropic` and `openai` SDKs retry rate limits, 408/409, 5xx and dropped connections
themselves (with backoff, honouring Retry-After). What reaches this module has failed for good
as far as that one call is concerned, and the loop only needs to know two things: may a later
call succeed (retryable: rate limit, overload, network, timeout) or never (bad request, bad key,
unknown model)? Both SDKs share the same exception shapes, so one mapping serves both.

Secrets given to the provider are scrubbed from every message, and the SDK exception is not
chained onto ours: servers echo keys back in error bodies, and a chained traceback would print them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, NamedTuple
from urllib.parse import urlparse

from client.policy import ProviderError
from client.providers.config import ProviderConfigError

# 408 timeout, 409 conflict (lock contention), 429 rate limit, 529 Anthropic "overloaded"; 5xx below.
RETRYABLE_STATUSES = frozenset({408, 409, 429, 529})

_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-*.]{6,}")


class SdkErrors(NamedTuple):
    """One SDK's exception classes: each SDK defines its own, with the same attributes."""

    base: type[Exception]  # APIError: everything below, and malformed responses
    status: type[Exception]  # APIStatusError: the server answered 4xx/5xx
    connection: type[Exception]  # APIConnectionError: no answer at all
    timeout: type[Exception]  # APITimeoutError (a kind of connection error)

    @property
    def caught(self) -> tuple[type[Exception], ...]:
        """What a provider turns into ProviderError: the SDK's errors, and a 2xx body that is not JSON,
        which the SDKs let through as json's own error (a proxy's HTML page, a server mid-restart)."""
        return (self.base, json.JSONDecodeError)


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


def scrub(text: str, secrets: Iterable[str]) -> str:
    """The text with every secret, and anything shaped like an API key, replaced."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return _KEY_LIKE.sub("sk-[redacted]", text)


def check_base_url(url: str, provider: str) -> str:
    """The URL without a trailing slash; ProviderConfigError now rather than a connection error per call."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ProviderConfigError(f"{provider}: bad base URL {url!r} (want http://HOST[:PORT]/...)")
    return url.rstrip("/")


def api_message(body: object, fallback: str) -> str:
    """The API's own words from an error body (Anthropic, OpenAI, vLLM, Ollama and FastAPI shapes).

    Anthropic's SDK keeps the whole body; OpenAI's keeps only its "error" member.
    """
    if isinstance(body, dict):
        err: Any = body.get("error", body)
        if isinstance(err, str) and err:
            return err[:500]
        if isinstance(err, dict):
            kind = err.get("type") or err.get("code")
            message = err.get("message") or err.get("detail")
            if message:
                return f"{kind}: {message}"[:500] if kind and kind != "error" else str(message)[:500]
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return fallback


def _attempts(exc: Exception) -> int | None:
    # The SDK stamps each attempt's request with how many retries came before it.
    headers = getattr(getattr(exc, "request", None), "headers", None)
    try:
        return int(headers.get("x-stainless-retry-count")) + 1 if headers is not None else None
    except (TypeError, ValueError):
        return None


def _gave_up(exc: Exception, what: str) -> str:
    n = _attempts(exc)
    return f"gave up after {n} attempt{'s' * (n != 1)}: {what}" if n else what


def to_provider_error(exc: Exception, sdk: SdkErrors, label: str, secrets: Iterable[str] = ()) -> ProviderError:
    """The ProviderError for an SDK exception: retryable unless the request itself can never succeed."""
    status: int | None = None
    if isinstance(exc, sdk.timeout):
        retryable, what = True, "timed out waiting for the server"
    elif isinstance(exc, sdk.connection):
        cause = exc.__cause__
        reason = f"{type(cause).__name__}: {cause}" if cause else str(exc)
        retryable, what = True, f"cannot reach the server: {reason}"
    elif isinstance(exc, sdk.status):
        status = int(getattr(exc, "status_code", 0)) or None
        response = getattr(exc, "response", None)
        hint = str(response.headers.get("x-should-retry", "")).lower() if response is not None else ""
        # The server's explicit word wins, as it does for the SDK's own retries.
        retryable = hint == "true" if hint in ("true", "false") else is_retryable_status(status or 0)
        what = f"HTTP {status}: {api_message(getattr(exc, 'body', None), str(exc))}"
    elif isinstance(exc, json.JSONDecodeError):
        retryable, what = True, f"the server's answer is not JSON ({exc})"
    else:  # another answer the SDK could not read: worth another try later
        retryable, what = True, f"{type(exc).__name__}: {exc}"
    if retryable:
        what = _gave_up(exc, what)
    return ProviderError(scrub(f"{label}: {what}", secrets), retryable=retryable, status=status)
