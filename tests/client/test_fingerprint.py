"""The key under which the bundled client answers a repeated profile from the log (client.fingerprint)."""

from __future__ import annotations

from client.fingerprint import attempt_key


def test_the_l2_regime_separates_attempts_and_its_default_keys_as_before() -> None:
    base = {"problem": "softmax", "shape": "bench", "source": "x"}
    plain = attempt_key("profile", base, fp="f")
    assert plain is not None
    # A cold profile said in words is the profile it always was (keys logged before the option still match).
    assert attempt_key("profile", {**base, "l2": "cold"}, fp="f") == plain
    # A warm one is another measurement: never answered from a cold one, nor the other way round.
    warm = attempt_key("profile", {**base, "l2": "warm"}, fp="f")
    assert warm is not None and warm != plain and "l2='warm'" in warm
