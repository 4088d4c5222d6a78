"""The Optuna study: objectives, constraints, de-duplication, the eager baseline, resume.

It knows nothing of how a model is compiled: it asks the space for a strategy, the runner for a
measurement, and stores both. Each canonical strategy is measured at most once per study; a
sampler's repeat reuses the stored values and is recorded as a repeat.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from autotune import deduction, runner, trials
from autotune.coordination import (
    REAP_S,
    Coordinator,
    LocalWorkers,
    Tally,
    check_environment,
)
from autotune.environment import fingerprint
from autotune.errors import AutotuneError, ConfigError
from autotune.measurement import Measurement
from autotune.progress import Progress
from autotune.selection import METRICS, choose, objective_values
from autotune.space import KEYS
from autotune.spec import StudySpec
from autotune.store import Store, mask, retrying
from autotune.strategy import Strategy

if TYPE_CHECKING:
    import optuna

T = TypeVar("T")
POLL_S = 5.0  # how often a worker with nothing to claim looks again


@dataclass
class Outcome:
    """How a search run ended."""

    study: str
    measured: int
    repeats: int
    stopped: str  # budget | time | exhausted | interrupted | worker limit


def resumable(stored: StudySpec | None, spec: StudySpec, name: str) -> StudySpec:
    """The spec this run stores: the new one, keeping the study's space when the new space is
    within it (the run is narrowed to it); a space that adds values is refused."""
    if stored is None or stored.space == spec.space:
        return spec
    if stored.space.contains(spec.space):
        return dataclasses.replace(spec, space=stored.space)
    wider = {
        n: [v for v in getattr(spec.space, n) if v not in getattr(stored.space, n)] for n in KEYS
    }
    added = "; ".join(f"{n} {', '.join(map(str, v))}" for n, v in wider.items() if v)
    raise ConfigError(
        f"study {name!r} was searched over another space, and this one adds {added}: resume "
        "it with the same space (or a narrower one), or start another study with --study NAME"
    )


class Search:
    """One process's part in a study: it claims and measures strategies until the study's
    budget, time or space runs out. Any number of these share a study through its storage:
    ask → de-duplicate → measure → tell, with :mod:`autotune.coordination` keeping them apart."""

    def __init__(
        self, spec: StudySpec, storage: str | None, *, force: bool = False,
        name: str | None = None, save_spec: bool = True,
    ) -> None:  # fmt: skip
        self.members = spec.space.validate(spec.workload.device)  # bad input: before any file
        self.keys = {s.key for s in self.members}
        self.environment = fingerprint(spec.workload.device)
        self.name = name or spec.study_name(self.environment)
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.store = Store(storage)
        row = self.store.study(self.name)
        stored = StudySpec.from_dict(row.spec) if row is not None and row.spec else None
        if row is not None and row.environment:
            check_environment(row.environment, self.environment, force)
        saved = resumable(stored, spec, self.name)
        self.spec = spec  # this run's space may be narrower than the study's (saved.space)
        if save_spec or row is None:
            self.store.add_study(self.name, saved.to_dict(), self.environment)
        if row is not None and not row.environment:  # submitted: the first joiner's
            self.store.set_environment(self.name, self.environment)
        self.store.add_run(self.name, self.environment)
        self.coord = Coordinator(self.store, self.name, self.worker)
        # a lone search is reproducible; workers that join a study each sample differently,
        # or they would all propose the same strategy at the same moment
        seed = spec.settings.seed if save_spec else hash((spec.settings.seed, self.worker))
        self.study, self.sampler = trials.open_study(
            self.store.url, self.name, saved.space, spec.sampler, seed % 2**31,
            len(self.members), len(spec.objectives), [METRICS[o] for o in spec.objectives],
        )  # fmt: skip
        self.tactics = deduction.Tactics(equivalence=spec.equivalence)
        self._baseline: Measurement | None = None  # stored once, never changes: read once
        self._current: int | None = None  # the trial this worker is on
        self.store.retry = True  # from here on, a lost connection is waited out, not fatal
        self.coord.retry = True

    def _db(self, fn: Callable[[], T], what: str) -> T:
        """An Optuna storage call that outlasts a database restart (see store.retrying)."""
        return retrying(fn, what, self.store.url)

    @property
    def storage_shown(self) -> str:
        return mask(self.store.url)

    @property
    def target(self) -> int:
        """The study's budget: strategies to measure."""
        return min(self.spec.trials, len(self.members))

    def measured(self) -> set[str]:
        """Keys of the space's strategies measured so far (the study's progress)."""
        return self.store.measured_keys(self.name) & self.keys

    def measure(self, strategy: Strategy) -> Measurement:
        spec = self.spec
        return runner.measure(spec.model, spec.workload, strategy, spec.settings)

    def baseline(self) -> Measurement:
        """The eager baseline, measured once per study (by whichever worker claims it). One
        that failed (a timeout, OOM or crash) is measured again on resume."""
        if self._baseline is not None:
            return self._baseline
        if reason := self.coord.forget_failed_baseline():
            print(f"autotune: the eager baseline failed before ({reason[:200]}); measuring it "
                  "again", file=sys.stderr, flush=True)  # fmt: skip
        with self.coord.pulse:
            while (row := self.store.measurement(self.name, "none")) is None:
                if self.coord.claim("none", None, 1, set()) == "claimed":
                    m = self.measure(Strategy.create("none"))
                    self.coord.record("none", None, m.to_dict())
                    self.coord.done("none")
                    continue
                tally = self.coord.tally({"none"})  # its worker may be dead
                self._db(lambda t=tally: self.coord.reap(self.study, t), "reap")
                time.sleep(POLL_S)
        m = Measurement.from_dict(row.payload)
        if not m.ok:
            raise AutotuneError(f"the eager baseline did not run ({m.status}): {m.reason}")
        self._baseline = m
        return m

    def _tell(self, trial: optuna.trial.Trial, m: Measurement, repeat_of: int | None) -> bool:
        """Tell Optuna, retried until it is stored. False when the trial had been failed by a
        peer (its worker was silent too long): then it holds none of this."""
        import optuna

        def tell() -> optuna.trial.FrozenTrial:
            trial.set_user_attr("key", Strategy.from_dict(m.strategy).key)
            details = {"strategy": m.strategy, "status": m.status, "worker": self.worker}
            if repeat_of is not None:
                trial.set_user_attr("repeat_of", repeat_of)
            if m.deduced:
                trial.set_user_attr("deduced", m.deduced)
            if not m.ok:
                trial.set_user_attr("reason", m.reason[:2000])
                trial.set_user_attr("autotune", details)
                return self.study.tell(trial, state=optuna.trial.TrialState.FAIL,
                                       skip_if_finished=True)  # fmt: skip
            measured_ms = m.latency and m.latency.median_ms
            details.update(speedup=m.speedup, latency_ms_measured=measured_ms)
            trial.set_user_attr("autotune", details)
            trial.set_constraint("accuracy", 0.0 if m.feasible else 1.0)
            if self.spec.max_memory_mb is not None and m.memory is not None:
                trial.set_constraint("memory", m.memory.compiled_peak_mb - self.spec.max_memory_mb)
            values = objective_values(m, self.spec.objectives, self.baseline())
            return self.study.tell(trial, values, skip_if_finished=True)

        ended = self._db(lambda: trials.finished_as(self.study, tell), "tell")
        expected = "COMPLETE" if m.ok else "FAIL"
        return ended is not None and ended.state.name == expected

    def _skip(self, trial: optuna.trial.Trial, key: str, why: str) -> None:
        """End a trial that measured nothing as FAIL, which no sampler learns from (a PRUNED
        one would teach TPE that a peer's strategy is bad)."""
        import optuna

        def tell() -> optuna.trial.FrozenTrial:
            trial.set_user_attr("key", key)
            trial.set_user_attr("skipped", why)
            return self.study.tell(trial, state=optuna.trial.TrialState.FAIL,
                                   skip_if_finished=True)  # fmt: skip

        self._db(lambda: trials.finished_as(self.study, tell), "tell")

    def step(self, tally: Tally, on_strategy: Callable[[str], None] = print) -> tuple[str, str]:
        """Ask for one trial and answer it. Returns the strategy's key and what happened:
        ``measured``, ``adopted`` (a stored measurement became this trial's), ``repeat``,
        ``taken`` (by another worker in the meantime) or ``dropped``."""
        free = [s for s in self.members if s.key not in tally.claimed]
        forced = next((s for s in self.members if s.key in tally.unadopted), None)
        self.sampler.cheap_first = self.tactics.cheap_first
        self.sampler.plan(free, forced or self._steer(tally, free))
        trial = self._db(self.study.ask, "ask")
        self._current = trial.number
        key = ""
        try:
            strategy = self.spec.space.suggest(trial)  # parameters wait in Optuna's cache
            key = strategy.key
            if key in tally.measured or key not in {s.key for s in free}:
                return key, self._reuse(trial, key)
            verdict = self.coord.claim(key, trial.number, self.spec.trials,
                                       set(self.keys - tally.deduced))  # fmt: skip
            if verdict != "claimed":
                why = "taken by another worker" if verdict == "taken" else "the budget is spent"
                self._skip(trial, key, why)
                return key, "taken"
            on_strategy(f"measuring {key}")
            m = self.measure(strategy)
            what = self._finish(trial, key, m)
        except BaseException:
            self._abandon(trial, key)
            raise
        finally:
            self._current = None
        if what == "measured":
            self.deduce(m, trial.number)
        return key, what

    def _steer(self, tally: Tally, free: list[Strategy]) -> Strategy | None:
        """The strategy the next trial must be, if the domain says so: an anchor not yet
        measured, or, when the budget covers every strategy left, the cheapest of them."""
        if self.tactics.anchors and (first := deduction.anchors(free)):
            return first[0]
        if self.tactics.exhaustive and free and self.spec.trials - tally.spent >= len(free):
            return min(free, key=deduction.cost)
        return None

    def deduce(self, m: Measurement, number: int) -> int:
        """Settle, without measuring, the strategies that trial ``number``'s measurement ``m``
        proves (see :mod:`autotune.deduction`): each gets a trial of its own, told ``m``'s
        values as a repeat, or its failure. Returns how many it settled."""
        found = []
        if self.tactics.implication:
            found += [(t, "implied") for t in deduction.implied_failures(m, self.members)]
        if self.tactics.equivalence:
            found += [(t, "equivalent") for t in deduction.equivalents(m, self.members)]
        if not found:
            return 0
        tally = self.coord.tally(self.keys)
        source = Strategy.from_dict(m.strategy).key
        settled = 0
        for target, how in found:
            if target.key in tally.claimed:
                continue
            self.sampler.plan([target], target)
            trial = self._db(self.study.ask, "ask")
            try:
                if self.coord.claim(target.key, trial.number, len(self.keys), set()) != "claimed":
                    self._skip(trial, target.key, "taken by another worker")
                    continue
                told = deduction.deduced(m, target, how)
                self.coord.record(target.key, trial.number, told.to_dict(), deduced_from=source)
                self._tell(trial, told, number if how == "equivalent" else None)
                self.coord.done(target.key)
                settled += 1
            except BaseException:
                self._abandon(trial, target.key)
                raise
        return settled

    def _reuse(self, trial: optuna.trial.Trial, key: str) -> str:
        """A proposal of a measured strategy: adopt its measurement if no trial has, else tell
        the stored values again as a repeat; a strategy in flight elsewhere is skipped."""
        row = self.store.measurement(self.name, key)
        if row is None:
            self._skip(trial, key, "taken by another worker")
            return "taken"
        m = Measurement.from_dict(row.payload)
        if row.trial_number is None and self.coord.adopt(key, trial.number):
            if not self._tell(trial, m, None):
                self.coord.unadopt(key, trial.number)
            return "adopted"
        self._tell(trial, m, row.trial_number)
        return "repeat"

    def _finish(self, trial: optuna.trial.Trial, key: str, m: Measurement) -> str:
        """Store a measurement, then tell it; what became of it."""
        stored = self.coord.record(key, trial.number, m.to_dict())
        if stored == "duplicate":
            print(f"autotune: {key} was measured by another worker meanwhile; this worker's "
                  "copy is dropped", file=sys.stderr, flush=True)  # fmt: skip
            self.coord.done(key)
            self._reuse(trial, key)
            return "dropped"
        if stored == "unadopted" or not self._tell(trial, m, None):
            print(f"autotune: trial {trial.number} was failed by another worker while this one "
                  f"was silent; its measurement of {key} is kept for the next trial",
                  file=sys.stderr, flush=True)  # fmt: skip
            self.coord.unadopt(key, trial.number)
        self.coord.done(key)
        return "measured"

    def _abandon(self, trial: optuna.trial.Trial, key: str) -> None:
        """Fail a trial interrupted before its measurement was stored and free its strategy
        (best effort: a claim left behind keeps no heartbeat, and is reaped)."""
        import optuna

        with contextlib.suppress(Exception):
            trial.set_user_attr("reason", "interrupted before it was measured")
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        if key:
            with contextlib.suppress(Exception):
                self.coord.release(key)

    def _reap(self, tally: Tally) -> None:
        own = {self._current} if self._current is not None else set()
        self._db(lambda: self.coord.reap(self.study, tally, own), "reap")

    def run(self, progress: bool = True, max_measure: int | None = None) -> Outcome:
        """Measure the baseline, then trials until the budget, time or space runs out (or,
        with ``max_measure``, until this process has measured that many)."""
        start = time.monotonic()
        self.baseline()
        bar = Progress(self.target, len(self.measured()), progress)
        measured = repeats = 0
        stopped = "budget"
        reaped = 0.0
        try:
            with self.coord.pulse:
                while True:
                    tally = self.coord.tally(self.keys)
                    if tally.stale or time.monotonic() - reaped >= REAP_S:  # dead workers
                        self._reap(tally)
                        reaped = time.monotonic()
                    if not tally.unadopted:  # a stored measurement is never left without a trial
                        if stop := self._stop(tally, start, measured, max_measure):
                            stopped = stop
                            break
                        if tally.spent >= self.spec.trials or tally.claimed >= self.keys:
                            bar.now("waiting for other workers")  # the rest is in their hands
                            time.sleep(POLL_S)
                            continue
                    key, what = self.step(tally, bar.now)
                    repeats += what == "repeat"
                    measured += what == "measured"
                    if what == "measured" and progress:  # the best so far costs a full read
                        bar.advance(len(self.measured()), key, self.best_so_far())
        except KeyboardInterrupt:
            stopped = "interrupted"
        finally:
            bar.close()
        return Outcome(self.name, measured, repeats, stopped)

    def _stop(self, tally: Tally, start: float, measured: int, limit: int | None) -> str | None:
        if tally.measured >= self.keys:
            return "exhausted"
        if len(tally.measured - tally.deduced) >= self.spec.trials:
            return "budget"
        if limit is not None and measured >= limit:
            return "worker limit"
        budget = self.spec.time_budget_s
        if budget is not None and time.monotonic() - start >= budget:
            return "time"
        return None

    def run_workers(self, count: int, progress: bool) -> Outcome:
        """Start ``count`` local worker processes on this study and follow them to the end."""
        devices = LocalWorkers.devices(self.spec.workload.device, count)
        if not self.spec.workload.is_cuda:
            print("autotune: warning: parallel trials on a CPU share its cores, which skews "
                  "both compile time and latency", file=sys.stderr)  # fmt: skip
        self.baseline()
        workers = LocalWorkers(self.name, self.store.url, devices)
        bar = Progress(self.target, len(self.measured()), progress)
        try:
            while workers.running():
                bar.advance(len(self.measured()), f"{count} workers", self.best_so_far())
                time.sleep(2)
        except KeyboardInterrupt:
            workers.stop()
            return Outcome(self.name, 0, 0, "interrupted")
        finally:
            bar.close()
        if failed := workers.failures():
            raise AutotuneError(f"{len(failed)} of {count} workers failed (exit {failed[0]})")
        done = len(self.measured())
        return Outcome(self.name, done, 0, "exhausted" if done >= len(self.members) else "budget")

    def best_so_far(self) -> str:
        try:
            best, _, _ = choose(self.store, self.name, self.spec.policy, self.spec.objectives)
        except AutotuneError:
            return "—"
        return f"{best.key} ({best.compile_s:.1f} s, {best.latency_ms:.3g} ms)"
