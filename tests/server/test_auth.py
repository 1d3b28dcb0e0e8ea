"""The HTTP bearer token: where it comes from, how it is stored, how it is checked."""

from __future__ import annotations

import stat
from pathlib import Path

import anyio
import pytest

from server.auth import StaticTokenVerifier, TokenError, load_token


def test_a_token_is_generated_once_with_mode_0600(marathon_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MARATHON_TOKEN", raising=False)
    first = load_token()
    assert first.origin == "generated" and first.path == marathon_home / "token"
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o600
    assert len(first.value) >= 32 and first.value not in repr(first)
    again = load_token()
    assert (again.origin, again.value) == ("file", first.value)


def test_the_environment_wins_and_writes_nothing(marathon_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARATHON_TOKEN", "from-the-environment-0123456789")
    token = load_token()
    assert (token.origin, token.value, token.path) == ("env", "from-the-environment-0123456789", None)
    assert not (marathon_home / "token").exists()


def test_a_readable_token_file_is_made_private(marathon_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MARATHON_TOKEN", raising=False)
    path = marathon_home / "token"
    path.write_text("a-token-someone-wrote-by-hand\n")
    path.chmod(0o644)
    assert load_token().value == "a-token-someone-wrote-by-hand"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("\n")
    with pytest.raises(TokenError, match="empty"):
        load_token()


def test_the_verifier_accepts_exactly_the_token() -> None:
    verifier = StaticTokenVerifier("s3cret-token-value")

    async def check(candidate: str) -> bool:
        return await verifier.verify_token(candidate) is not None

    for candidate, expected in [("s3cret-token-value", True), ("s3cret-token-valu", False), ("", False),
                                ("s3cret-token-value ", False), ("S3CRET-TOKEN-VALUE", False)]:
        assert anyio.run(check, candidate) is expected, candidate
