"""How a tuner run's end reads in the log, for whoever reports on it (`status`, `report`).

The loop records a policy's last words as the run's end reason ("the policy finished: <text>"), so the
tuner's texts start with these fixed phrases; this module holds them with nothing heavy around them (no
Optuna), so `status` can say "space exhausted" without importing the search.
"""

from __future__ import annotations

SPACE_EXHAUSTED = "tuner: the search space is exhausted"
NOTHING_TO_TUNE = "tuner: nothing to tune"
NEW_BEST = "tuner: new best"


def space_exhausted(reason: str | None) -> bool:
    """Whether a run's end reason (run.end "reason", `status` "reason") says the tuner tried every valid
    configuration of its space."""
    return bool(reason) and SPACE_EXHAUSTED in str(reason)


def nothing_to_tune(reason: str | None) -> bool:
    """Whether a run's end reason says the tuner found nothing it could search (and why, after the phrase)."""
    return bool(reason) and NOTHING_TO_TUNE in str(reason)
