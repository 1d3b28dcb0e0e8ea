"""Bearer-token auth for the HTTP transport.

One shared secret: $MARATHON_TOKEN if set, else state_dir()/token, generated on first start with
mode 0600. Every request to /mcp must carry `Authorization: Bearer <token>`; a missing or wrong
token gets 401 from the SDK's bearer middleware. The comparison runs in constant time (over
SHA-256 digests, so not even the length leaks).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from state import state_dir

log = logging.getLogger("marathon.server.auth")

TOKEN_ENV = "MARATHON_TOKEN"
MIN_TOKEN_CHARS = 16


class TokenError(RuntimeError):
    """The token cannot be used (an empty file, a file that cannot be read)."""


@dataclass(frozen=True)
class Token:
    value: str
    origin: str  # "env", "file" or "generated"
    path: Path | None

    def __repr__(self) -> str:  # never print the secret by accident
        return f"Token(origin={self.origin!r}, path={self.path!r})"


def token_path() -> Path:
    return state_dir() / "token"


def load_token(path: Path | None = None) -> Token:
    """The token from $MARATHON_TOKEN, else the token file, else a new one written to the file."""
    env = os.environ.get(TOKEN_ENV, "").strip()
    if env:
        if len(env) < MIN_TOKEN_CHARS:
            log.warning("%s is shorter than %d characters: easy to guess", TOKEN_ENV, MIN_TOKEN_CHARS)
        return Token(env, "env", None)
    path = path or token_path()
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("token file %s had mode %o; set to 0600", path, mode)
            os.chmod(path, 0o600)
        value = path.read_text(encoding="utf-8").strip()
        if not value:
            raise TokenError(f"the token file {path} is empty; delete it to generate a new token")
        return Token(value, "file", path)
    value = secrets.token_urlsafe(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.write(fd, (value + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another server created the file meanwhile: use theirs
    except FileExistsError:
        tmp.unlink()
        return load_token(path)
    tmp.unlink()
    return Token(value, "generated", path)


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class StaticTokenVerifier:
    """A TokenVerifier (mcp.server.auth.provider) that accepts exactly one bearer token."""

    def __init__(self, token: str) -> None:
        self._digest = _digest(token)

    async def verify_token(self, token: str) -> Any:
        from mcp.server.auth.provider import AccessToken

        if hmac.compare_digest(_digest(token), self._digest):
            return AccessToken(token="<redacted>", client_id="marathon-token", scopes=[])
        return None


def auth_kwargs(token: str, url: str) -> dict[str, Any]:
    """MCPServer keyword arguments that require `token` on every HTTP request.

    No OAuth: there is no authorization server and no protected-resource metadata, so clients use
    the static header they are configured with. The SDK requires an issuer URL in AuthSettings
    even so; it is only used to build that metadata, which is not served here.
    """
    from mcp.server.auth.settings import AuthSettings

    return {"token_verifier": StaticTokenVerifier(token),
            "auth": AuthSettings(issuer_url=url, resource_server_url=None)}  # type: ignore[arg-type]
