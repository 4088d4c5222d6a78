"""The library's whole job, search -> confirm -> export: one :class:`Tuning` run (open it, run
it with a listener, finish it), as ``tune()``, ``autotune search`` and every queue worker run
it; the command line only parses and prints.

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
    from autotune.choice.confirm import Confirmation
    from autotune.choice.selection import Point
    from autotune.search import Listener, Outcome, Search, StudySpec
    from autotune.ship.study import StudyView


@dataclass(frozen=True)
class Tuned:
    """What :func:`tune` found: the study, how its search ended, the chosen strategy and the
    file it was exported to (``chosen`` and ``path`` are None when the search was interrupted
    before an answer)."""

    study: str
    outcome: Outcome | None  # None where another process ran the search (a queue's study)
    chosen: Point | None = None
    path: Path | None = None
    notes: list[str] = field(default_factory=list)
    view: StudyView | None = None  # the study as stored once it finished (its read side)


class Tuning:
    """One tuning run, as Optuna's ``Study`` is one study: :meth:`open` (create or resume the
    study, and the plan of a lone search's time budget), :meth:`run` (the search, reporting to
    a listener), :meth:`finish` (confirm the pick, export it)."""

    def __init__(self, search: Search, workers: int = 1, force: bool = False) -> None:
        self.search, self.workers, self.force = search, workers, force
        self.outcome: Outcome | None = None

    @classmethod
    def open(
        cls, spec: StudySpec, storage: str | None = None, *, workers: int = 1,
        force: bool = False, began: float | None = None,
    ) -> Tuning:  # fmt: skip
        """Check the model, then open the study in ``storage``; ``began`` (``time.time()``)
        starts a lone search's time budget earlier than now (the command's own start)."""
        from autotune import catalog
        from autotune.search import open_search, stops
        from autotune.search.plan import Plan
        from autotune.trial.rungs import wanted

        catalog.check(spec.model, spec.workload)
        search = open_search(spec, storage, force=force)
        if workers == 1:  # a lone search keeps its budget whole (autotune.search.plan)
            rungs = wanted(spec.rungs, spec.objectives, spec.policy)
            search.plan = Plan(spec.time_budget_s, began or time.time(),
                               iters=spec.settings.iters, rungs=rungs,
                               floors=stops.stopped_before(search))  # fmt: skip
        return cls(search, workers, force)

    @classmethod
    def join(
        cls, study: str, storage: str | None = None, *, device: str | None = None,
        force: bool = False, allow: list[str] | None = None, clean: bool = True,
    ) -> Tuning:  # fmt: skip
        """Join an existing study as one of its workers (the queue's, which finishes each study
        it ends as this Tuning): everything comes from the storage, the code its spec names runs
        only where ``allow`` names it, and the budget is the study's end time."""
        from autotune.search import join

        return cls(join(study, storage, device=device, force=force, allow=allow, clean=clean),
                   force=force)  # fmt: skip

    @property
    def name(self) -> str:
        return self.search.name

    def run(self, listener: Listener | None = None, *, max_measure: int | None = None,
            leave: bool = False) -> Outcome:  # fmt: skip
        """The search, here or in ``workers`` local processes, until its budget, time or space
        runs out (or it is interrupted: ``outcome.stopped == "interrupted"``); a worker's
        until it has measured ``max_measure``, or (``leave``) when the rest is in others'
        hands."""
        from autotune.job.local import run_workers
        from autotune.search import run

        if self.workers > 1:
            self.outcome = run_workers(self.search, self.workers, listener, self.force)
        else:
            self.outcome = run(self.search, listener, max_measure, leave)
        return self.outcome

    def finish(
        self, *, confirm: bool = True, fmt: str = "accelerate", out: str | None = None,
        listener: Listener | None = None,
    ) -> Tuned:  # fmt: skip
        """Confirm the pick (within what is left of a time budget) and export it."""
        path, chosen, notes = confirm_and_export(self.search, confirm=confirm, fmt=fmt, out=out,
                                     listener=listener)  # fmt: skip
        from autotune.ship.study import StudyView

        view = StudyView.of(self.search.store, self.name)
        return Tuned(self.name, self.outcome, chosen, path, notes, view)


def tune(
    spec: StudySpec | str, *, storage: str | None = None, workers: int = 1,
    listener: Listener | None = None, confirm: bool = True, fmt: str = "accelerate",
    out: str | None = None, force: bool = False, **flags: Any,
) -> Tuned:  # fmt: skip
    """Search how to compile a model, confirm the pick and export it: one :class:`Tuning`.

    ``spec`` is a :class:`~autotune.search.spec.StudySpec`, or a model (a preset, a directory
    or ``package.module:function``) with the command line's settings as keywords
    (``layers=2, backend="eager,inductor", trials=8``). Trials go to ``storage`` (default
    ``sqlite:///studies/autotune.db``); ``workers`` > 1 runs local worker processes. Bad input
    raises :class:`~autotune.errors.ConfigError` before anything is stored.
    """
    from autotune.search.spec import StudySpec

    if isinstance(spec, str):  # a search run now: autotune search's default budget
        spec = StudySpec.from_sources(None, searched=True, model=spec, **flags)
    tuning = Tuning.open(spec, storage, workers=workers, force=force)
    outcome = tuning.run(listener)
    if outcome.stopped == "interrupted":
        return Tuned(tuning.name, outcome)
    return tuning.finish(confirm=confirm, fmt=fmt, out=out, listener=listener)


def confirm_and_export(
    search: Search, *, confirm: bool = True, fmt: str = "accelerate", out: str | None = None,
    listener: Listener | None = None,
) -> tuple[Path, Point, list[str]]:  # fmt: skip
    """The end of a study's search: confirm the pick (timed again against its nearest rivals
    and eager; stored), then export it."""
    from autotune.ship import export

    if confirm:
        confirm_pick(search, listener)
    spec = search.spec
    return export.export(search.store, search.name, spec.policy, fmt, out, spec.max_memory_mb)


def confirm_pick(search: Search, listener: Listener | None = None) -> None:
    """Time the pick against its nearest rivals and eager; store what the rounds showed; drop
    the compile caches kept for it. ``listener`` hears of it only when a compiled strategy
    passed (else there is nothing to time, and the confirmation says so)."""
    from autotune.choice.confirm import confirm
    from autotune.choice.selection import choose

    spec, plan = search.spec, search.plan
    rows = search.store.measurements(search.name)
    chosen, points, front = choose(rows, spec.policy, spec.objectives, spec.max_memory_mb)
    if listener is not None and any(p.key != "none" for p in points):
        listener.now("confirming the pick against its nearest rivals")
    began = time.time()
    if plan is not None:  # its rounds end with the budget, never below its own least
        spec = dataclasses.replace(spec, settings=plan.for_confirmation(spec.settings))
    result = confirm(spec, chosen, points, front, search.keep)
    if spec.workload.traffic and result.latency_ms and spec.workload.kind == "generate":
        result.lines.append("served as measured: not checked for a generate traffic (its plain "
                            "loop through apply_generation is not built yet)")  # fmt: skip
    elif spec.workload.traffic and result.latency_ms:
        result = served_as_measured(search, spec, result, points, listener)
    if plan is not None:
        plan.spent["confirmation"] = time.time() - began
    search.store.add_confirmation(search.name, spec.policy, result.pick, result.to_dict())
    shutil.rmtree(search.keep, ignore_errors=True)


def served_as_measured(
    search: Search, spec: StudySpec, result: Confirmation, points: list[Point],
    listener: Listener | None,
) -> Confirmation:  # fmt: skip
    """A traffic confirmation's self-check (:mod:`autotune.choice.as_served`): each strategy
    it confirmed served through its export in a plain loop, in a fresh process warm from its
    trial's caches, before the budget's end (``spec.settings.stop_at``)."""
    import os
    import tempfile

    from autotune.choice import as_served
    from autotune.search.baseline import reference
    from autotune.search.state import Lines
    from autotune.ship.export import served_file
    from autotune.trial import parent
    from autotune.trial.measurement import Measurement

    trials = {r.key: Measurement.from_dict(r.payload)
              for r in search.store.measurements(search.name)}  # fmt: skip
    judged_by = reference(search, listener or Lines())
    work = tempfile.mkdtemp(prefix="autotune-served-")

    def serve(key: str) -> Measurement:
        if listener is not None:
            listener.now(f"serving the traffic through {key}'s export in a plain loop")
        strategy = trials[key].strategy
        path = served_file(strategy, spec.workload, os.path.join(work, "best.json"))
        return parent.serve(spec.model, spec.workload, strategy, str(path), spec.settings,
                            parent.cache_folder(search.keep, key), judged_by)  # fmt: skip

    def left_s() -> float | None:
        stop_at = spec.settings.stop_at
        return stop_at - time.time() if stop_at else None

    try:
        return as_served.prove(result, points, trials, spec.policy, spec.objectives, serve,
                               left_s)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
