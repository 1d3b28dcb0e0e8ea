"""One JSON POST with retries: the only way providers talk to a model server.

A day-long run meets rate limits, overloaded servers and dropped connections many times. Each is
retried here with exponential backoff and jitter, or after the server's Retry-After, so the loop
sees a ProviderError only once a call has really failed (retryable) or can never succeed (not
retryable: bad request, bad key). Secrets given to the client are scrubbed from every message it
produces; the headers that carry them are never part of a repr.
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timezone
from typing import Any

import httpx

from client.policy import ProviderError

# 408 timeout, 409 conflict (lock contention), 429 rate limit, 529 Anthropic "overloaded"; 5xx below.
RETRYABLE_STATUSES = frozenset({408, 409, 429, 529})

RetryHook = Callable[[int, float, str], None]
"""Called before each wait: (attempt that failed, seconds to wait, why), so the loop can log retries."""

_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-*.]{6,}")


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: retry-after-ms, or Retry-After in seconds or as an HTTP date."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            pass
        else:
            if math.isfinite(value):
                return max(0.0, value)
    raw = (headers.get("retry-after") or "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def scrub(text: str, secrets: Iterable[str]) -> str:
    """The text with every secret, and anything shaped like an API key, replaced."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return _KEY_LIKE.sub("sk-[redacted]", text)


def error_message(response: httpx.Response) -> str:
    """The API's own words for a failed request (Anthropic, OpenAI, vLLM, Ollama and FastAPI shapes)."""
    try:
        data = response.json()
    except ValueError:
        text = response.text.strip()
        return text[:500] or response.reason_phrase
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            kind = err.get("type") or err.get("code")
            message = err.get("message")
            if message:
                return f"{kind}: {message}" if kind else str(message)
        if isinstance(err, str) and err:
            return err
        for key in ("message", "detail"):
            if data.get(key):
                return str(data[key])[:500]
    return json.dumps(data)[:500]


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one call tries. Waits grow 1-2 s, 2-4 s, 4-8 s ... up to backoff_max_s (equal jitter)."""

    max_attempts: int = 6
    timeout_s: float = 300.0
    backoff_base_s: float = 2.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")

    def delay(self, attempt: int, retry_after: float | None, rand: float) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based); the server's Retry-After wins, capped."""
        if retry_after is not None:
            return min(retry_after, self.retry_after_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (attempt - 1))
        return ceiling / 2.0 + rand * ceiling / 2.0


class JsonClient:
    """POST JSON to one server, with retries. One per provider, so connections are reused."""

    def __init__(
        self,
        label: str,
        base_url: str,
        headers: Mapping[str, str],
        retry: RetryPolicy | None = None,
        *,
        secrets: Iterable[str] = (),
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        on_retry: RetryHook | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.label = label
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.attempts_total = 0
        self.retries_total = 0
        self._secrets = tuple(s for s in secrets if s)
        self._sleep = sleep
        self._rand = rand
        self._on_retry = on_retry
        timeout = httpx.Timeout(self.retry.timeout_s, connect=min(self.retry.timeout_s, 30.0))
        self._client = httpx.Client(headers=dict(headers), timeout=timeout, transport=transport)

    def __repr__(self) -> str:
        return f"JsonClient({self.label!r}, {self.base_url!r})"

    def close(self) -> None:
        self._client.close()

    def _fail(self, message: str, retryable: bool, status: int | None) -> ProviderError:
        return ProviderError(scrub(f"{self.label}: {message}", self._secrets), retryable=retryable, status=status)

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON object the server answered with; ProviderError once retries are spent or pointless."""
        url = self.base_url + path
        payload = json.dumps(body).encode("utf-8")
        last, last_status = "", None
        attempts = self.retry.max_attempts
        for attempt in range(1, attempts + 1):
            self.attempts_total += 1
            retry_after = None
            try:
                response = self._client.post(url, content=payload, headers={"content-type": "application/json"})
            except httpx.UnsupportedProtocol as exc:
                raise self._fail(f"bad base URL {self.base_url!r}: {exc}", False, None) from None
            except httpx.TransportError as exc:
                last, last_status = f"{type(exc).__name__}: {exc}".rstrip(": "), None
            else:
                status = response.status_code
                if 200 <= status < 300:
                    try:
                        data = response.json()
                    except ValueError:
                        data = None
                    if isinstance(data, dict):
                        return data
                    last = f"HTTP {status} but the body is not a JSON object: {response.text[:200]!r}"
                    last_status = status
                else:
                    last, last_status = f"HTTP {status}: {error_message(response)}", status
                    hint = response.headers.get("x-should-retry", "").lower()
                    retryable = hint == "true" if hint in ("true", "false") else is_retryable_status(status)
                    if not retryable:
                        raise self._fail(last, False, status)
                    retry_after = parse_retry_after(response.headers)
            if attempt == attempts:
                break
            delay = self.retry.delay(attempt, retry_after, self._rand())
            if self._on_retry is not None:
                self._on_retry(attempt, delay, scrub(last, self._secrets))
            self.retries_total += 1
            self._sleep(delay)
        raise self._fail(f"gave up after {attempts} attempt{'s' * (attempts != 1)}: {last}", True, last_status)
