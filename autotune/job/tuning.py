"""The library's whole job, search -> confirm -> export: one :class:`Tuning` run (open or join
it, run it with a listener, finish it) in this process, as ``tune()``, ``autotune search``, a
study's worker and every queue worker run it (``search --workers K``'s:
:class:`autotune.job.local.LocalTuning`); the command line only parses and prints.

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
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from autotune.choice.confirm import Confirmation
    from autotune.choice.selection import Point
    from autotune.search import Listener, Outcome, Search, StudySpec
    from autotune.search.plan import Plan
    from autotune.ship.study import StudyView


@dataclass(frozen=True)
class Tuned:
    """What :func:`autotune.tune` found: the study, how its search ended, the chosen strategy
    and the file it was exported to (``chosen`` and ``path`` are None when the search was
    interrupted before an answer)."""

    study: str
    outcome: Outcome | None  # None where another process ran the search (a queue's study)
    chosen: Point | None = None
    path: Path | None = None
    notes: list[str] = field(default_factory=list)
    view: StudyView | None = None  # the study as stored once it finished (its read side)


class Tuning:
    """One tuning run, as Optuna's ``Study`` is one study: :meth:`open` (create or resume the
    study) or :meth:`join` (as one of its workers), :meth:`run` (the search in this process,
    reporting to a listener, within its plan's time budget), :meth:`finish` (confirm the pick,
    export it)."""

    def __init__(self, search: Search, force: bool = False) -> None:
        self.search, self.force = search, force
        self.outcome: Outcome | None = None

    @classmethod
    def open(
        cls, spec: StudySpec, storage: str | None = None, *, force: bool = False,
        began: float | None = None,
    ) -> Self:  # fmt: skip
        """Check the model, then open the study in ``storage``; ``began`` (``time.time()``)
        starts its time budget earlier than now (the command's own start)."""
        from autotune import catalog
        from autotune.search import open_search

        catalog.check(spec.model, spec.workload)
        return cls(open_search(spec, storage, force=force, began=began), force)

    @classmethod
    def join(
        cls, study: str, storage: str | None = None, *, device: str | None = None,
        force: bool = False, allow: list[str] | None = None, clean: bool = True,
    ) -> Self:  # fmt: skip
        """Join an existing study as one of its workers (``autotune worker``, the processes of
        ``search --workers K``, a queue's worker): everything comes from the storage, the code
        its spec names runs only where ``allow`` names it, and its time budget starts now."""
        from autotune.search import join

        return cls(join(study, storage, device=device, force=force, allow=allow, clean=clean),
                   force)  # fmt: skip

    @property
    def name(self) -> str:
        return self.search.name

    def run(self, listener: Listener | None = None, *, max_measure: int | None = None,
            leave: bool = False) -> Outcome:  # fmt: skip
        """The search in this process, until its budget, time or space runs out (or it is
        interrupted: ``outcome.stopped == "interrupted"``); a worker's until it has measured
        ``max_measure``, or (``leave``) when the rest is in others' hands."""
        from autotune.search import run

        self.outcome = run(self.search, listener, max_measure, leave)
        return self.outcome

    def finish(
        self, *, confirm: bool = True, fmt: str = "accelerate", out: str | None = None,
        listener: Listener | None = None,
    ) -> Tuned:  # fmt: skip
        """Confirm the pick (within what is left of the time budget) and export it."""
        path, chosen, notes = confirm_and_export(self.search, confirm=confirm, fmt=fmt, out=out,
                                     listener=listener)  # fmt: skip
        from autotune.ship.study import StudyView

        view = StudyView.of(self.search.store, self.name)
        return Tuned(self.name, self.outcome, chosen, path, notes, view)


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
    from autotune.choice.confirm import confirm, rests_on, unconfirmed
    from autotune.choice.selection import choose
    from autotune.trial.measurement import Measurement

    spec, plan = search.spec, search.plan
    rows = search.store.measurements(search.name)
    chosen, points, front = choose(rows, spec.policy, spec.objectives, spec.max_memory_mb)
    if listener is not None and any(p.key != "none" for p in points):
        listener.now("confirming the pick against its nearest rivals")
    began = time.time()  # its rounds end with the budget, never below its own least
    row = next((r for r in rows if r.key == chosen.key), None)
    trial = Measurement.from_dict(row.payload) if row is not None else None
    short = short_to_confirm(plan, search.backends, search.traffic)
    if short and any(p.key != "none" for p in points):  # the pick stands on its trial's rounds
        result = unconfirmed(chosen.key, trial, short)
    else:
        spec = dataclasses.replace(spec, settings=plan.for_confirmation(spec.settings))
        result = confirm(spec, chosen, points, front, search.keep)
        if spec.workload.traffic and result.latency_ms:
            result = served_as_measured(search, spec, result, points, listener)
        plan.spent["confirmation"] = time.time() - began
        if result.status != "ok" and result.pick == chosen.key != "none":  # stopped, say on what
            result.lines += [line] if (line := rests_on(trial)) else []
    search.store.add_confirmation(search.name, spec.policy, result.pick, result.to_dict())
    shutil.rmtree(search.keep, ignore_errors=True)


def short_to_confirm(plan: Plan, backends: list[str], traffic: bool) -> str:
    """Why no confirmation fits what is left of the budget ("" where one does, or there is no
    budget): the least one, of the pick alone, costs more than is left."""
    left = plan.left_s()
    if left is None or plan.round_s is None:
        return ""
    least = plan.confirmation_s(backends, traffic, timed=1)
    if left >= least:
        return ""
    return (f"the budget ended first ({max(left, 0):.0f} s left, a confirmation of the pick "
            f"alone needs about {least:.0f} s)")  # fmt: skip


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
