"""The state of one process's search, and the listener it reports to.

:class:`Search` holds what a search needs between steps (built by :func:`.open.open_search`);
the protocol of a step is in :mod:`.step`, the loop in :mod:`.loop`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from autotune.coordination import Coordinator
from autotune.search.deduction import Tactics
from autotune.search.sampler import Steered
from autotune.space import Space
from autotune.spec import StudySpec
from autotune.storage import Store, mask
from autotune.strategy import Strategy

if TYPE_CHECKING:
    import optuna

    from autotune.measurement import Measurement
    from autotune.runner import Reference


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

    def measure(self, strategy: Strategy) -> Measurement:
        """One strategy measured as the study's spec says, in fresh processes (the runner);
        a replay of a recorded study looks it up instead."""
        from autotune import runner

        spec = self.spec
        return runner.measure(spec.model, spec.workload, strategy, spec.settings, self.reference)

    def measured(self) -> set[str]:
        """Keys of the space's strategies measured by a trial so far (not deduced)."""
        return self.store.measured_keys(self.name) & self.keys
