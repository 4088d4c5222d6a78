"""Trials stopped at a time budget, read back from the study: what a summary names, and what a
later run's plan starts from (a backend's compile costs at least what its stopped trial ran).
:func:`autotune.search.step.stopped` tells Optuna of one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.storage import retrying

if TYPE_CHECKING:
    from autotune.search.state import Search


@dataclass(frozen=True)
class Stop:
    """A trial stopped at a time budget: its strategy, backend (as the plan prices it:
    :func:`autotune.search.deduction.priced_as`), seconds run and why."""

    key: str
    backend: str
    seconds: float
    why: str


def stopped_trials(search: Search) -> list[Stop]:
    """The study's trials stopped at a time budget whose strategy no trial has measured
    since, in the order they ran."""
    import optuna

    states = (optuna.trial.TrialState.FAIL,)
    failed = retrying(lambda: search.optuna.get_trials(deepcopy=False, states=states), "read",
                      search.store.url)  # fmt: skip
    measured = search.store.measured_keys(search.name)
    found = []
    for t in failed:
        said, key = t.user_attrs.get("stopped"), t.user_attrs.get("key")
        if isinstance(said, dict) and isinstance(key, str) and key not in measured:
            found.append(Stop(key, str(said.get("backend", "")), float(said.get("seconds") or 0),
                              str(said.get("why", ""))))  # fmt: skip
    return found


def stopped_before(search: Search) -> dict[str, float]:
    """Per backend, the longest that a trial of the study ran before an earlier run's time
    budget stopped it (none measured since): its compile costs at least about that."""
    floors: dict[str, float] = {}
    for stop in stopped_trials(search):
        floors[stop.backend] = max(floors.get(stop.backend, 0.0), stop.seconds)
    return floors
