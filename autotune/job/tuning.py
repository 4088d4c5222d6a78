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
        """Confirm the pick (within what is left of the time budget) and export it. Where the
        budget stopped the trials and the confirmation ruled out every candidate with time to
        spare, the search goes back to its trials, then confirms again (:meth:`back`)."""
        from autotune.ship import export

        search = self.search
        if confirm:
            confirmed = confirm_pick(search, listener)
            for _ in range(RETURNS):
                if not self.back(confirmed, listener):
                    break
                confirmed = confirm_pick(search, listener, before=confirmed)
        spec = search.spec
        path, chosen, notes = export.export(search.store, search.name, spec.policy, fmt, out,
                                            spec.max_memory_mb)  # fmt: skip
        from autotune.ship.study import StudyView

        view = StudyView.of(self.search.store, self.name)
        return Tuned(self.name, self.outcome, chosen, path, notes, view)

    def back(self, confirmed: Confirmation, listener: Listener | None) -> bool:
        """Whether the search goes back to its trials after ``confirmed``: the time budget
        stopped them, the confirmation showed none of the strategies it timed faster than
        eager (no share is kept to confirm them again), and a trial that can decide fits in
        what is left. Then it runs them (:func:`autotune.search.loop.trials`) and says so."""
        from autotune.search.loop import Outcome, trials
        from autotune.search.state import Lines

        was, plan, search = self.outcome, self.search.plan, self.search
        timed = [k for k in confirmed.latency_ms if k != "none"]
        if (was is None or was.stopped != "time" or not self.alone or confirmed.status != "ok"
                or confirmed.pick != "none" or not timed):  # fmt: skip
            return False
        plan.ruled_out(len(timed))
        if not plan.may_start(search.backends, search.traffic):
            return False
        listener = listener or Lines()
        left = plan.left_s() or 0.0
        listener.note(f"the confirmation showed {len(timed)} candidate(s) no faster than eager "
                      f"with {left:.0f} s of the budget left: back to the trials")  # fmt: skip
        now = trials(search, listener)
        self.outcome = Outcome(now.study, was.measured_here + now.measured_here, now.measured,
                               now.deduced, was.repeats + now.repeats, now.stopped)  # fmt: skip
        return True

    @property
    def alone(self) -> bool:
        """Whether this process runs the study's trials itself (not ``--workers K``'s)."""
        return True


RETURNS = 3  # the most times a search goes back to its trials after a confirmation


def confirm_pick(search: Search, listener: Listener | None = None,
                 before: Confirmation | None = None) -> Confirmation:  # fmt: skip
    """Time the pick against its nearest rivals and eager; store what the rounds showed; drop
    the compile caches kept for it. ``listener`` hears of it only when a compiled strategy
    passed (else there is nothing to time, and the confirmation says so). A confirmation
    ``before`` this one (whose candidates it ruled out) stands: what it timed is not timed
    again, and what it showed is stored with this one's (:func:`after`)."""
    from autotune.choice.confirm import confirm, rests_on, unconfirmed
    from autotune.choice.selection import choose
    from autotune.trial.measurement import Measurement

    spec, plan = search.spec, search.plan
    rows = search.store.measurements(search.name)
    chosen, points, front = choose(rows, spec.policy, spec.objectives, spec.max_memory_mb)
    first = chosen.key
    if before is not None:
        chosen, points, front = ruled_out(before, points, spec.policy, spec.objectives)
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
        plan.spent["confirmation"] = plan.spent.get("confirmation", 0.0) + time.time() - began
        if result.status != "ok" and result.pick == chosen.key != "none":  # stopped, say on what
            result.lines += [line] if (line := rests_on(trial)) else []
    if before is not None:
        result = after(before, result, first)
    search.store.add_confirmation(search.name, spec.policy, result.pick, result.to_dict())
    shutil.rmtree(search.keep, ignore_errors=True)
    return result


def ruled_out(before: Confirmation, points: list[Point], policy: str,
              objectives: tuple[str, ...]) -> tuple[Point, list[Point], list[Point]]:  # fmt: skip
    """The pick, the points and the front once the strategies a confirmation ``before`` timed
    and did not show faster are as eager: never its rivals again."""
    from autotune.choice.selection import pareto, pick

    base = next(p.latency_ms for p in points if p.key == "none")
    out = set(before.latency_ms) - {"none"}
    points = [dataclasses.replace(p, latency_ms=base, speedup=min(p.speedup, 1.0),
                                  significant=False) if p.key in out else p
              for p in points]  # fmt: skip
    return pick(points, policy, objectives), points, pareto(points, objectives)


def after(before: Confirmation, now: Confirmation, chosen: str) -> Confirmation:
    """One confirmation of the study's pick ``chosen`` (as its trials choose it) from one
    ``before`` it and one ``now`` after the search went back to its trials: what both timed,
    and said, in that order; the pick is now's."""
    timed = bool(now.latency_ms) or now.status == "unconfirmed"
    back = (
        "back to the trials: the search measured more, then confirmed again"
        if timed
        else "back to the trials: the search measured more; none of it needs confirming"
    )
    return dataclasses.replace(
        now, chosen=chosen, rounds=before.rounds + now.rounds, wall_s=before.wall_s + now.wall_s,
        lines=[*before.lines, back, *(now.lines if timed else [])],
        status=now.status if timed else before.status,
        latency_ms={**before.latency_ms, **now.latency_ms},
        speedup={**before.speedup, **now.speedup},
    )  # fmt: skip


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
