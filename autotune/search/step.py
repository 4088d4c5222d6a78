"""One step of a search: ask Optuna for a trial → de-duplicate → claim → measure → store → tell,
and what the measurement proves about other strategies (:mod:`.deduction`). What the steps are
judged against, measured once before them, is :mod:`.baseline`'s.

A trial always ends: told its values, failed with its reason, or failed as skipped (a strategy
taken by a peer in the meantime). A measurement is never left without a trial.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from autotune.choice.objectives import HIGHER
from autotune.choice.selection import objective_values
from autotune.errors import shorten
from autotune.search import deduction, surrogate
from autotune.storage import retrying
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from autotune.coordination import Tally
    from autotune.search.state import Listener, Search

T = TypeVar("T")
POLL_S = 5.0  # how often a worker with nothing to claim looks again


def db(search: Search, fn: Callable[[], T], what: str) -> T:
    """An Optuna storage call that outlasts a database restart (see storage.retrying)."""
    return retrying(fn, what, search.store.url)


def finished_as(study: optuna.Study, tell: Callable[[], T]) -> T | None:
    """Tell Optuna (or write a trial's parameter); what it returns, or None if the trial had
    ended already (failed by a peer as its worker's while it was away)."""
    import optuna

    try:
        return tell()
    except optuna.exceptions.UpdateFinishedTrialError:
        return None


def tell(search: Search, trial: optuna.trial.Trial, m: Measurement, repeat_of: int | None) -> bool:
    """Tell Optuna, retried until it is stored. False when the trial had been failed by a peer
    (its worker was silent too long): then it holds none of this."""
    import optuna

    spec = search.spec

    def told() -> FrozenTrial:
        trial.set_user_attr("key", m.strategy.key)
        details = {"strategy": m.strategy.to_dict(), "status": m.status, "worker": search.worker}
        if repeat_of is not None:
            trial.set_user_attr("repeat_of", repeat_of)
        if m.deduced:
            trial.set_user_attr("deduced", m.deduced)
        if m.rung:
            trial.set_user_attr("rung", m.rung)
        if not m.ok:
            trial.set_user_attr("reason", shorten(m.reason, 2000))
            trial.set_user_attr("autotune", details)
            return search.optuna.tell(trial, state=optuna.trial.TrialState.FAIL,
                                      skip_if_finished=True)  # fmt: skip
        measured_ms = m.latency and m.latency.median_ms
        details.update(speedup=m.speedup, latency_ms_measured=measured_ms)
        trial.set_user_attr("autotune", details)
        trial.set_constraint("accuracy", 0.0 if m.feasible else 1.0)
        if spec.max_memory_mb is not None and m.memory is not None:
            trial.set_constraint("memory", m.memory.compiled_peak_mb - spec.max_memory_mb)
        values = objective_values(m, spec.objectives, search.baseline)
        return search.optuna.tell(trial, values, skip_if_finished=True)

    ended = db(search, lambda: finished_as(search.optuna, told), "tell")
    expected = "COMPLETE" if m.ok else "FAIL"
    if ended is None:  # ended before: failed by a reaper, or this tell's own commit landed and
        # a lost connection swallowed the answer (the retry then finds it ended). Only this
        # worker tells this trial COMPLETE (a reaper only fails), so COMPLETE is ours; a failed
        # measurement is a FAIL trial whoever ended it.
        return db(search, lambda: trial_state(search.optuna, trial.number), "tell") == expected
    return ended.state.name == expected


def trial_state(study: optuna.Study, number: int) -> str:
    """The state of trial ``number`` as the storage holds it."""
    return next(t.state.name for t in study.get_trials(deepcopy=False) if t.number == number)


def skip(search: Search, trial: optuna.trial.Trial, key: str, why: str) -> None:
    """End a trial that measured nothing as FAIL, which no sampler learns from (a PRUNED one
    would teach TPE that a peer's strategy is bad)."""
    import optuna

    def told() -> FrozenTrial:
        trial.set_user_attr("key", key)
        trial.set_user_attr("skipped", why)
        return search.optuna.tell(trial, state=optuna.trial.TrialState.FAIL,
                                  skip_if_finished=True)  # fmt: skip

    db(search, lambda: finished_as(search.optuna, told), "tell")


def step(search: Search, tally: Tally, listener: Listener) -> tuple[str, str]:
    """Ask for one trial and answer it. Returns the strategy's key and what happened:
    ``measured``, ``adopted`` (a stored measurement became this trial's), ``repeat``,
    ``taken`` (by another worker in the meantime), ``dropped`` or ``stopped`` (at the time
    budget: see :func:`stopped`)."""
    free = [s for s in search.members if s.key not in tally.claimed]
    # what fits the time left, at what compiles have cost here
    free = search.plan.fitting(free, search.backends, search.traffic) or free
    forced = next((s for s in search.members if s.key in tally.unadopted), None)
    search.sampler.cheap_first = search.tactics.cheap_first
    search.sampler.probe_fits = lambda dear: search.plan.probe_fits(dear, search.backends,
                                                                    search.traffic)  # fmt: skip
    search.sampler.plan(free, forced or steer(search, tally, free))
    trial = db(search, search.optuna.ask, "ask")
    search.current = trial.number
    key = ""
    try:
        # the parameters wait in Optuna's cache; each is written to the storage, so an outage
        # can hit here too, and a peer may have failed the trial meanwhile (this worker silent
        # past the grace period): it holds nothing of this worker's yet, so ask again
        strategy = db(search, lambda: finished_as(search.optuna, lambda: search.space.suggest(
            trial)), "suggest")  # fmt: skip
        if strategy is None:
            return key, "dropped"
        key = strategy.key
        if key in tally.settled or key not in {s.key for s in free}:
            return key, reuse(search, trial, key)
        counted = set(search.keys - tally.deduced)
        verdict = search.coord.claim(key, trial.number, search.spec.trials, counted)
        if verdict != "claimed":
            why = "taken by another worker" if verdict == "taken" else "the budget is spent"
            skip(search, trial, key, why)
            return key, "taken"
        listener.now(f"measuring {key}")
        m = search.measure(strategy)
        if m.status == "stopped":
            stopped(search, trial, key, m, listener)
            return key, "stopped"
        what = store_and_tell(search, trial, key, m, listener)
    except BaseException:
        abandon(search, trial, key)
        raise
    finally:
        search.current = None
    if what == "measured":
        deduce(search, m, trial.number)
    return key, what


def steer(search: Search, tally: Tally, free: list[Strategy]) -> Strategy | None:
    """The strategy the next trial must be, if the domain says so: an anchor not yet measured;
    when the budget covers every strategy left, the cheapest of them; else the surrogate's
    pick (None: the sampler's)."""
    if search.tactics.anchors and (first := deduction.anchors(free, search.members)):
        return first[0]
    if search.tactics.exhaustive and free and search.spec.trials - tally.spent >= len(free):
        return min(free, key=deduction.cost)
    if search.tactics.model:
        return model_pick(search, free)
    return None


def model_pick(search: Search, free: list[Strategy]) -> Strategy | None:
    """The surrogate's pick among ``free`` from the study's measured strategies so far."""
    from autotune.choice.selection import candidates

    rows = [r for r in search.store.measurements(search.name) if r.deduced_from is None]
    points = candidates(rows, search.spec.max_memory_mb, cheap=True)  # what it tells of a factor
    objectives = search.spec.objectives
    values = {Strategy.from_dict(p.strategy): p.values(objectives) for p in points}
    feasible = {p.key for p in points}
    failed = [Strategy.from_dict(r.payload["strategy"]) for r in rows if r.key not in feasible]
    evidence = surrogate.as_measured(points, objectives)
    higher = [o in HIGHER for o in objectives]
    return surrogate.propose(values, failed, free, search.tactics.spread, evidence, higher)


def deduce(search: Search, m: Measurement, number: int) -> int:
    """Settle, without measuring, the strategies that trial ``number``'s measurement ``m``
    proves (see :mod:`.deduction`): each gets a trial of its own, told ``m``'s values as a
    repeat, or its failure. Returns how many it settled."""
    found = []
    if search.tactics.implication:
        found += [(t, "implied") for t in deduction.implied_failures(m, search.members)]
    if search.tactics.equivalence:
        found += [(t, "equivalent") for t in deduction.equivalents(m, search.members)]
    if not found:
        return 0
    tally = search.coord.tally(search.keys)
    source = m.strategy.key
    settled = 0
    for target, how in found:
        if target.key in tally.claimed:
            continue
        search.sampler.plan([target], target)
        trial = db(search, search.optuna.ask, "ask")
        try:
            claim = search.coord.claim(target.key, trial.number, len(search.keys), set())
            if claim != "claimed":
                skip(search, trial, target.key, "taken by another worker")
                continue
            told = deduction.deduced(m, target, how)
            search.coord.record(target.key, trial.number, told.to_dict(), deduced_from=source)
            tell(search, trial, told, number if how == "equivalent" else None)
            search.coord.done(target.key)
            settled += 1
        except BaseException:
            abandon(search, trial, target.key)
            raise
    return settled


def reuse(search: Search, trial: optuna.trial.Trial, key: str) -> str:
    """A proposal of a settled strategy: adopt its measurement if no trial has, else tell the
    stored values again as a repeat; a strategy in flight elsewhere is skipped."""
    row = search.store.measurement(search.name, key)
    if row is None:
        skip(search, trial, key, "taken by another worker")
        return "taken"
    m = Measurement.from_dict(row.payload)
    if row.trial_number is None:
        if search.coord.adopt(key, trial.number):
            if not tell(search, trial, m, None):
                search.coord.unadopt(key, trial.number)
            return "adopted"
        # a peer's trial adopted it since it was read: this trial repeats that one (told as
        # the read row says, it would count as a second measurement of the strategy)
        row = search.store.measurement(search.name, key)
        if row is None or row.trial_number is None:  # adopted and freed again meanwhile
            skip(search, trial, key, "adopted by another worker's trial")
            return "taken"
    tell(search, trial, m, row.trial_number)
    return "repeat"


def store_and_tell(
    search: Search, trial: optuna.trial.Trial, key: str, m: Measurement, listener: Listener
) -> str:
    """Store a measurement, then tell it; what became of it."""
    coord = search.coord
    stored = coord.record(key, trial.number, m.to_dict())
    if stored == "duplicate":
        listener.note(f"{key} was measured by another worker meanwhile; this worker's copy is "
                      "dropped")  # fmt: skip
        coord.done(key)
        reuse(search, trial, key)
        return "dropped"
    if stored == "unadopted" or not tell(search, trial, m, None):
        listener.note(f"trial {trial.number} was failed by another worker while this one was "
                      f"silent; its measurement of {key} is kept for the next trial")  # fmt: skip
        coord.unadopt(key, trial.number)
    coord.done(key)
    return "measured"


def stopped(
    search: Search, trial: optuna.trial.Trial, key: str, m: Measurement, listener: Listener
) -> None:
    """A trial stopped at the time budget: stopped is not failed. Nothing is stored as its
    measurement (a later run with more time measures it again), its claim is freed, and its
    Optuna trial ends failed with how long it ran and where it had got to."""
    import optuna

    def told() -> FrozenTrial:
        trial.set_user_attr("key", key)
        trial.set_user_attr("reason", m.reason)
        trial.set_user_attr("stopped", {"seconds": round(m.wall_s or 0.0, 1), "why": m.reason,
                                        "backend": deduction.priced_as(m.strategy)})  # fmt: skip
        return search.optuna.tell(trial, state=optuna.trial.TrialState.FAIL,
                                  skip_if_finished=True)  # fmt: skip

    db(search, lambda: finished_as(search.optuna, told), "tell")
    search.coord.release(key)
    listener.note(f"{key}: {m.reason}; a later run with a larger --time-budget measures it")


def abandon(search: Search, trial: optuna.trial.Trial, key: str) -> None:
    """Fail a trial interrupted before its measurement was stored and free its strategy (best
    effort: a claim left behind keeps no heartbeat, and is reaped)."""
    import optuna

    with contextlib.suppress(Exception):
        trial.set_user_attr("reason", "interrupted before it was measured")
        search.optuna.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    if key:
        with contextlib.suppress(Exception):
            search.coord.release(key)
