"""``tune()``: the library's whole job, search -> confirm -> export, as ``autotune search`` and
every queue worker run it.

>>> from autotune import tune
>>> result = tune("toy-64", layers=2, backend="eager,aot_eager", trials=3)  # doctest: +SKIP
>>> result.chosen.key, result.path  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.choice.selection import Point
    from autotune.search import Listener, Search
    from autotune.search.loop import Outcome
    from autotune.search.spec import StudySpec


@dataclass(frozen=True)
class Tuned:
    """What :func:`tune` found: the study, how its search ended, the chosen strategy and the
    file it was exported to (``chosen`` and ``path`` are None when the search was interrupted
    before an answer)."""

    study: str
    outcome: Outcome
    chosen: Point | None = None
    path: Path | None = None
    notes: list[str] = field(default_factory=list)


def tune(
    spec: StudySpec | str, *, storage: str | None = None, workers: int = 1,
    listener: Listener | None = None, confirm: bool = True, fmt: str = "accelerate",
    out: str | None = None, force: bool = False, **flags: Any,
) -> Tuned:  # fmt: skip
    """Search how to compile a model, confirm the pick and export it.

    ``spec`` is a :class:`~autotune.search.spec.StudySpec`, or a model (a preset, a directory
    or ``package.module:function``) with the command line's settings as keywords
    (``layers=2, backend="eager,inductor", trials=8``). Trials go to ``storage`` (default
    ``sqlite:///studies/autotune.db``); ``workers`` > 1 runs local worker processes. Bad input
    raises :class:`~autotune.errors.ConfigError` before anything is stored.
    """
    from autotune import catalog
    from autotune.search import open_search, run, run_workers
    from autotune.search.spec import StudySpec

    if isinstance(spec, str):
        spec = StudySpec.from_sources(None, model=spec, **flags)
    catalog.check(spec.model, spec.workload)
    search = open_search(spec, storage, force=force)
    if workers > 1:
        outcome = run_workers(search, workers, listener, force)
    else:
        outcome = run(search, listener)
    if outcome.stopped == "interrupted":
        return Tuned(search.name, outcome)
    path, chosen, notes = finish(search, confirm=confirm, fmt=fmt, out=out, listener=listener)
    return Tuned(search.name, outcome, chosen, path, notes)


def finish(
    search: Search, *, confirm: bool = True, fmt: str = "accelerate", out: str | None = None,
    listener: Listener | None = None,
) -> tuple[Path, Point, list[str]]:  # fmt: skip
    """The end of a study's search: confirm the pick (timed again against its nearest rivals
    and eager; stored), then export it."""
    from autotune.ship import export

    if confirm:
        if listener is not None:
            listener.now("confirming the pick against its nearest rivals")
        confirm_pick(search)
    spec = search.spec
    return export.export(search.store, search.name, spec.policy, fmt, out, spec.max_memory_mb)


def confirm_pick(search: Search) -> None:
    """Time the pick against its nearest rivals and eager; store what the rounds showed; drop
    the compile caches kept for it."""
    from autotune.choice.confirm import confirm
    from autotune.choice.selection import choose

    spec, plan = search.spec, search.plan
    rows = search.store.measurements(search.name)
    chosen, points, front = choose(rows, spec.policy, spec.objectives, spec.max_memory_mb)
    began = time.time()
    if plan is not None:  # its rounds end with the budget, never below its own least
        spec = dataclasses.replace(spec, settings=plan.for_confirmation(spec.settings))
    result = confirm(spec, chosen, points, front, search.keep)
    if plan is not None:
        plan.spent["confirmation"] = time.time() - began
    search.store.add_confirmation(search.name, spec.policy, result.pick, result.to_dict())
    shutil.rmtree(search.keep, ignore_errors=True)
