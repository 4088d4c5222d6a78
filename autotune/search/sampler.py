"""The sampler: Optuna's samplers, steered away from strategies that are taken.

Only Optuna's public API is used: the ``BaseSampler`` interface and Optuna's own samplers.

Several workers share a study and each strategy is measured once, so a sampler's proposal of a
strategy that is measured or being measured is wasted work. :class:`Steered` wraps Optuna's
sampler: it takes the sampler's proposal for the whole strategy and, when that strategy is
taken, moves it to the nearest one that is free. Every trial gets every parameter, with a fixed
value where a field does not apply, so every sampler sees the whole space.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution

from autotune.search.deduction import cost
from autotune.strategy import Strategy
from autotune.strategy.space import Space

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial


def quiet_optuna() -> None:
    """autotune shows its own progress: Optuna's per-trial log lines and warnings are noise."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


SAMPLERS = ("surrogate", "tpe", "gp", "nsga2", "random", "grid")


def base_sampler(name: str, seed: int, size: int) -> optuna.samplers.BaseSampler | None:
    """Optuna's sampler for a space of ``size`` strategies (``grid``: none, space order;
    ``surrogate``: TPE, for the trials where the surrogate has no pick)."""
    startup = max(4, min(10, size // 6))
    if name in ("tpe", "surrogate"):
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, n_startup_trials=startup
        )
    if name == "gp":
        return optuna.samplers.GPSampler(
            seed=seed, n_startup_trials=startup, warn_independent_sampling=False
        )
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, startup))
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return None


class Steered(optuna.samplers.BaseSampler):
    """A sampler that proposes only strategies that are free, or measured but not yet a trial's.

    Before each ``ask`` the study tells it what is free (:meth:`plan`). The wrapped sampler's
    proposal (its relative sample, completed by its own independent draws while it starts up) is
    kept if its strategy is free, else moved to the free strategy that agrees with it in the most
    fields. With ``cheap_first``, ties go to the quickest to compile, and a dear backend's cell
    (granularity, ``dynamic``, ``fullgraph``) is tried with the eager backend first, whose trial
    shows Dynamo's verdict on that cell for every backend, where the budget has room for the
    dear trial after it (:attr:`probe_fits`).
    ``grid`` (no wrapped sampler) takes the free strategies in the space's order.
    """

    def __init__(self, base: optuna.samplers.BaseSampler | None, space: Space, seed: int) -> None:
        self.base, self.space = base, space
        self.rng = random.Random(seed)
        self.free: list[Strategy] = []
        self.forced: Strategy | None = None
        self.cheap_first = True  # ties go to the strategy quickest to compile
        # whether the budget has room for a dear backend's trial after an eager probe of its cell
        self.probe_fits: Callable[[str], bool] = lambda backend: True

    def plan(self, free: list[Strategy], forced: Strategy | None = None) -> None:
        """The strategies the next trial may be, or the one it must be (to adopt a stored one)."""
        self.free, self.forced = free, forced

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self.space.distributions()

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if self.forced is not None:
            return self.space.params(self.forced)
        proposal: dict[str, Any] = {}
        if self.base is not None:
            inner = self.base.infer_relative_search_space(study, trial)
            proposal = self.base.sample_relative(study, trial, inner) if inner else {}
            for name, dist in search_space.items():  # what it leaves (starting up): its own draw
                if name in proposal or not isinstance(dist, CategoricalDistribution):
                    continue
                proposal[name] = (
                    dist.choices[0] if len(dist.choices) == 1
                    else self.base.sample_independent(study, trial, name, dist)
                )  # fmt: skip
        return self.space.params(self.nearest(proposal))

    def nearest(self, proposal: dict[str, Any]) -> Strategy:
        """The free strategy that agrees with the proposal in the most given fields."""
        if not self.free:
            raise RuntimeError("Steered.plan() gave no free strategy")
        if self.base is None:
            return self.free[0]

        def agreement(s: Strategy) -> int:
            params = self.space.params(s)
            return sum(params[k] == v for k, v in proposal.items() if k in params)

        best = max(map(agreement, self.free))
        ties = [s for s in self.free if agreement(s) == best]
        if not self.cheap_first:
            return self.rng.choice(ties)
        cheapest = min(map(cost, ties))
        chosen = self.rng.choice([s for s in ties if cost(s) == cheapest])
        # a dear backend's cell (granularity, dynamic, fullgraph) is first tried with eager,
        # which shows Dynamo's verdict on it (failures, graph breaks) for every backend
        g, d, f = chosen.granularity, chosen.dynamic, chosen.fullgraph
        probe, free = Strategy.create(g, "eager", None, d, f), {s.key for s in self.free}
        if cost(chosen)[0] >= 3 and probe.key in free and self.probe_fits(chosen.backend):
            return probe
        return chosen

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:  # fmt: skip
        # every parameter is relative; this is reached only for a parameter outside the space
        assert isinstance(param_distribution, CategoricalDistribution)
        return param_distribution.choices[0]

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self.base is not None:
            self.base.before_trial(study, trial)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: Any, values: Any
    ) -> None:  # fmt: skip
        if self.base is not None:
            self.base.after_trial(study, trial, state, values)
