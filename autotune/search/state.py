"""The state of one process's search, and the listener it reports to.

:class:`Search` holds what a search needs between steps (built by :func:`.open.open_search`);
the protocol of a step is in :mod:`.step`, the loop in :mod:`.loop`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from autotune import variables
from autotune.coordination import Coordinator
from autotune.search.deduction import Tactics, priced_as
from autotune.search.plan import Plan
from autotune.search.sampler import Steered
from autotune.search.spec import StudySpec
from autotune.start_kinds import LATER
from autotune.storage import Store, mask
from autotune.strategy import Strategy
from autotune.strategy.space import Space
from autotune.trial.timing import deciding_rounds

if TYPE_CHECKING:
    import optuna

    from autotune.trial.measurement import Measurement
    from autotune.trial.reference import Reference
    from autotune.trial.rungs import Rung
    from autotune.workload import Settings


class Listener(Protocol):
    """What a search tells whoever follows it."""

    def now(self, what: str) -> None:
        """What the search is doing at this moment."""

    def measured(self, key: str, done: int) -> None:
        """A strategy was measured; ``done`` strategies of the study's space are now."""

    def note(self, line: str) -> None:
        """Something the user should read (a dropped copy, a baseline measured again)."""


class Lines:
    """A listener that writes the notes to stderr and nothing else (no bar)."""

    def now(self, what: str) -> None:
        pass

    def measured(self, key: str, done: int) -> None:
        pass

    def note(self, line: str) -> None:
        print(f"autotune: {line}", file=sys.stderr, flush=True)


@dataclass
class Search:
    """One process's part in a study: it claims and measures strategies until the study's
    budget, time or space runs out. Any number of these share a study through its storage:
    ask → de-duplicate → measure → tell (:mod:`.step`), looped by :mod:`.loop`, with
    :mod:`autotune.coordination` keeping them apart. Build one with :func:`open_search`."""

    spec: StudySpec  # this run's: its space may be narrower than the study's
    space: Space  # the study's: every trial's parameters are drawn from it
    name: str
    worker: str
    store: Store
    coord: Coordinator
    optuna: optuna.Study
    sampler: Steered
    members: list[Strategy]  # what this run may measure (its space's)
    keys: set[str]  # the study's space: what its budget and progress count
    environment: dict[str, Any]
    plan: Plan  # this process's time budget and what costs what here, a lone search's or a
    # worker's alike (its clock starts as the search opens or the worker joins)
    tactics: Tactics = field(default_factory=Tactics)
    run_keys: set[str] = field(init=False)
    baseline: Measurement | None = None  # stored once, never changes: read once
    reference: Reference | None = None  # the study's higher-precision outputs, likewise
    current: int | None = None  # the trial this worker is on

    def __post_init__(self) -> None:
        self.run_keys = {s.key for s in self.members}

    @property
    def storage_shown(self) -> str:
        return mask(self.store.url)

    @property
    def target(self) -> int:
        """The study's budget: strategies to measure."""
        return min(self.spec.trials, len(self.keys))

    @property
    def keep(self) -> str:
        """Where this machine keeps the compile caches of the contenders, for the confirmation
        of the pick (removed once it is done)."""
        return str(variables.studies() / self.name / "caches")

    def measure(self, strategy: Strategy) -> Measurement:
        """One strategy measured as the study's spec says, in fresh processes (the runner),
        its rounds and its end fitted to the plan's budget, what it cost learned by the plan;
        a replay of a recorded study looks it up instead. Its warm and portable starts are
        measured only when an objective or the policy needs them, or it is a contender; a
        compiled strategy that cannot reach the front stops after a cheap rung (:meth:`rung`)."""
        import time

        from autotune.trial import parent

        spec, plan, settings = self.spec, self.plan, self.spec.settings
        if strategy.granularity == "none":
            settings = plan.for_baseline(settings)
        else:
            left = max(1, self.target - len(self.measured()))
            settings = plan.for_trial(settings, self.backends, self.traffic, left)
        rung = self.rung(settings) if strategy.granularity != "none" else None
        began = time.time()
        m = parent.run_trial(spec.model, spec.workload, strategy, settings, self.reference,
                             self.needs_later_starts, self.keep, rung)  # fmt: skip
        plan.learn_trial(strategy, m, time.time() - began)
        self.prune_caches()
        return m

    def rung(self, settings: Settings) -> Rung | None:
        """A compiled trial's cheap rung (:mod:`autotune.trial.rungs`): the deciding rounds, then
        a check against the study's front so far. None where the spec turns rungs off, its
        objectives or policy need what a rung does not measure, or the trial times no more
        rounds than the rung."""
        from autotune.choice.selection import candidates, pareto
        from autotune.trial.rungs import Rung, handed, wanted

        spec, rounds = self.spec, deciding_rounds()
        if not wanted(spec.rungs, spec.objectives, spec.policy):
            return None
        if settings.iters <= rounds:
            return None
        points = candidates(self.store.measurements(self.name), spec.max_memory_mb)
        front = handed(pareto(points, spec.objectives), spec.objectives)
        return Rung(rounds, front) if front else None

    @property
    def backends(self) -> list[str]:
        """The backends of this run's compiled strategies, as the plan prices them
        (:func:`autotune.search.deduction.priced_as`; eager's if none)."""
        found = sorted({priced_as(s) for s in self.members if s.granularity != "none"})
        return found or ["eager"]

    @property
    def traffic(self) -> bool:
        return bool(self.spec.workload.traffic)

    def measured(self) -> set[str]:
        """Keys of the study space's strategies measured by a trial so far (not deduced)."""
        return self.store.measured_keys(self.name) & self.keys

    def contenders(self, extra: Measurement | None = None) -> list[str]:
        """The keys a confirmation may time now (the front, and the fastest compiled
        strategies: :func:`autotune.choice.confirm.contenders`), ``extra`` counted in if given."""
        from autotune.choice.confirm import contenders
        from autotune.choice.selection import candidates, pareto
        from autotune.storage import Stored

        rows = self.store.measurements(self.name)
        if extra is not None:
            key = extra.strategy.key
            rows.append(Stored(-1, key, None, extra.status, extra.to_dict(), None, None, None))
        points = candidates(rows, self.spec.max_memory_mb)
        return [p.key for p in contenders(points, pareto(points, self.spec.objectives))]

    def needs_later_starts(self, m: Measurement) -> bool:
        """Whether a cold trial's warm and portable starts (and its kept caches) are worth it:
        an objective or the policy counts them, or it is a contender (the front table shows
        its starts, and a confirmation may time it)."""
        later = set(LATER)
        if later & set(self.spec.objectives) or self.spec.policy.startswith("restarts"):
            return True
        return m.feasible and m.strategy.key in self.contenders(m)

    def prune_caches(self) -> None:
        """Drop the kept caches of strategies that are no longer contenders."""
        import shutil

        from autotune.trial.parent import cache_folder

        if not os.path.isdir(self.keep):
            return
        wanted = {os.path.basename(cache_folder(self.keep, k)) for k in self.contenders()}
        for name in set(os.listdir(self.keep)) - wanted:
            shutil.rmtree(os.path.join(self.keep, name), ignore_errors=True)
