"""Optuna's TPE over a SearchSpace, its study rebuilt from the history for every proposal.

Nothing of the study outlives a proposal: each one builds an in-memory study from the trials folded from
the log (in log order, with their values), seeds the sampler from the run's seed and the number of trials,
and asks once. So the proposal is a function of the log and the seed alone: a resumed run, or a run whose
process was replaced, proposes exactly what the uninterrupted run would have.

Knobs whose choices are ascending numbers are given to TPE as the index of the choice (an integer range,
so it can use that neighbouring block sizes behave alike); the others as categorical choices. A sample
that breaks a constraint, or names a configuration already tried, is repaired to the nearest valid free
configuration (SearchSpace.nearest: TPE's leading knobs kept, the later ones moved the least); when no
valid configuration is free, the space is exhausted, and that walk over the whole space is the proof.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from client.search.history import Trial
from client.search.source import Config
from client.search.space import Constraint, SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)
optuna.logging.disable_default_handler()
logging.getLogger("optuna").propagate = False

STARTUP_TRIALS = 10  # random samples before TPE models the history


@dataclass(frozen=True)
class Proposal:
    config: Config
    how: str  # "the kernel as it is", "TPE", "TPE, repaired" (the nearest valid untried one to its sample)
    broke: tuple[Constraint, ...] = field(default=())  # the constraints TPE's sample broke (repaired)
    sample: Config | None = None  # TPE's own sample, when it was repaired


class Optimiser:
    """Proposes the next configuration to profile."""

    def __init__(self, space: SearchSpace, seed: int = 0, startup: int = STARTUP_TRIALS) -> None:
        self.space = space
        self.seed = int(seed)
        self.startup = startup
        self.distributions: dict[str, BaseDistribution] = {
            k.name: IntDistribution(0, len(k.choices) - 1) if k.ordinal else CategoricalDistribution(k.choices)
            for k in space.knobs}

    def encode(self, config: Config) -> dict[str, Any]:
        return {k.name: k.index(config[k.name]) if k.ordinal else k.choices[k.index(config[k.name])]
                for k in self.space.knobs}

    def decode(self, params: dict[str, Any]) -> Config:
        return {k.name: k.choices[int(params[k.name])] if k.ordinal else params[k.name] for k in self.space.knobs}

    def study(self, trials: Sequence[Trial]) -> optuna.Study:
        """An in-memory study holding these trials, its sampler seeded by the seed and the trial count."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=(self.seed * 1_000_003 + len(trials)) % 2**32,
                                                 multivariate=True, n_startup_trials=self.startup)
        study = optuna.create_study(direction="minimize", sampler=sampler)
        study.add_trials([optuna.trial.create_trial(params=self.encode(t.config), distributions=self.distributions,
                                                    value=t.value) for t in trials])
        return study

    def sample(self, trials: Sequence[Trial]) -> Config:
        """TPE's next sample given these trials (constraints not applied)."""
        study = self.study(trials)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            asked = study.ask(self.distributions)
        return self.decode(asked.params)

    def propose(self, trials: Sequence[Trial], free: Callable[[Config], bool],
                first: Config | None = None) -> Proposal | None:
        """The next configuration to profile: `first` (the kernel's own) while it is valid and free, then TPE's
        sample, repaired when it breaks a constraint or is not free. None: no valid configuration is free."""
        if first is not None and self.space.valid(first) and free(first):
            return Proposal(dict(first), "the kernel as it is")
        sample = self.sample(trials)
        if self.space.valid(sample) and free(sample):
            return Proposal(sample, "TPE")
        broke = tuple(self.space.violated(sample))
        repaired = self.space.nearest(sample, free)
        if repaired is None:
            return None
        return Proposal(repaired, "TPE, repaired", broke, sample)
