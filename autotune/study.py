"""The Optuna study: objectives, constraints, de-duplication, the eager baseline, resume.

It knows nothing of how a model is compiled: it asks the space for a strategy, the runner for a
measurement, and stores both. Each canonical strategy is measured at most once per study; a
sampler's repeat reuses the stored values and is recorded as a repeat.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from autotune import runner
from autotune.environment import fingerprint
from autotune.errors import AutotuneError, ConfigError
from autotune.measurement import Measurement
from autotune.spec import StudySpec
from autotune.store import MeasurementRow, Store, mask, retrying
from autotune.strategy import Strategy
from autotune.trials import (
    GRACE_S,
    HEARTBEAT_S,
    Heartbeat,
    TrialStorage,
    live_workers,
)

if TYPE_CHECKING:
    import optuna

T = TypeVar("T")
METRICS = {"compile": "compile_s", "latency": "latency_ms", "memory": "memory_mb"}
MAX_REPEATS_IN_A_ROW = 8
POLL_S = 2.0  # how often a worker with nothing to claim looks again
# The fields of the environment that make measurements comparable.
COMPARABLE = ("torch", "cuda", "device", "device_name")


@dataclass
class Outcome:
    """How a search run ended."""

    study: str
    measured: int
    repeats: int
    stopped: str  # budget | time | exhausted | interrupted


def objective_values(
    m: Measurement, objectives: tuple[str, ...], baseline_ms: float | None
) -> list[float]:
    """The values Optuna minimises for a measurement that ran (latency on the common scale)."""
    from autotune.export import latency_on_baseline

    assert m.latency is not None and m.compile_s is not None
    values = {"compile": m.compile_s, "latency": latency_on_baseline(m, baseline_ms)}
    if m.memory is not None:
        values["memory"] = m.memory.compiled_peak_mb
    return [values[o] for o in objectives]


def make_sampler(name: str, seed: int, size: int) -> optuna.samplers.BaseSampler:
    """The sampler for a space of ``size`` strategies (grid enqueues, then samples nothing)."""
    import optuna

    startup = max(4, min(10, size // 6))
    if name == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, n_startup_trials=startup
        )
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, startup))
    return optuna.samplers.RandomSampler(seed=seed)


def open_study(storage: TrialStorage, name: str, spec: StudySpec, size: int) -> optuna.Study:
    """Create or load the Optuna study in the same database as autotune's tables."""
    import optuna

    study = optuna.create_study(
        storage=storage, study_name=name, load_if_exists=True,
        sampler=make_sampler(spec.sampler, spec.settings.seed, size),
        directions=["minimize"] * len(spec.objectives),
    )  # fmt: skip
    study.set_metric_names([METRICS[o] for o in spec.objectives])
    return study


def check_environment(stored: dict[str, Any], here: dict[str, Any], force: bool) -> None:
    """Refuse to mix measurements from another GPU, CPU or torch, unless forced."""
    differ = [k for k in COMPARABLE if stored.get(k) != here.get(k)]
    if differ and not force:
        detail = ", ".join(f"{k}: study {stored.get(k)!r} vs here {here.get(k)!r}" for k in differ)
        raise ConfigError(
            f"this machine differs from the study's ({detail}); mixed measurements would be "
            "meaningless (use --force to join anyway)"
        )


class Search:
    """One process's part in a study: it claims and measures strategies until the study's
    budget, time or space runs out. Any number of these share a study through its storage."""

    def __init__(
        self, spec: StudySpec, storage: str | None, *, force: bool = False,
        name: str | None = None, save_spec: bool = True,
    ) -> None:  # fmt: skip
        self.spec = spec
        self.members = spec.space.validate(spec.workload.device)
        self.keys = {s.key for s in self.members}
        self.environment = fingerprint(spec.workload.device)
        self.name = name or spec.study_name(self.environment)
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.store = Store(storage)
        stored = self.store.study(self.name)
        if stored is not None and stored.environment:
            check_environment(stored.environment, self.environment, force)
        if save_spec or stored is None:
            self.store.add_study(self.name, spec.to_dict(), self.environment)
        if stored is not None and not stored.environment:  # submitted: the first joiner's
            self.store.set_environment(self.name, self.environment)
        self.store.add_run(self.name, self.environment)
        self.trials = TrialStorage(self.store.url, self._release)
        self.study = open_study(self.trials, self.name, spec, len(self.members))
        self.rng = random.Random(spec.settings.seed)
        self._baseline: Measurement | None = None  # stored once, never changes: read once
        self._measurements: dict[str, MeasurementRow] = {}
        self._seen: set[str] | None = None  # the keys measured, as progress last saw them
        self.store.retry = True  # from here on, a lost connection is waited out, not fatal

    def _db(self, fn: Callable[[], T], what: str) -> T:
        """An Optuna storage call that outlasts a database restart (see store.retrying)."""
        return retrying(fn, what, self.store.url)

    def _release(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Optuna's stale-trial callback: a dead worker's strategy goes back to the pool."""
        self.store.release(self.name, trial.number)

    @property
    def storage_shown(self) -> str:
        return mask(self.store.url)

    def measured(self) -> set[str]:
        """Keys of the space's strategies measured so far (the study's progress)."""
        return self.store.measured_keys(self.name) & self.keys

    def progress(self) -> tuple[set[str], set[str]]:
        """Keys of the space's strategies measured, and measured or being measured (claimed)."""
        measured, claimed = self.store.progress(self.name)
        self._seen = measured
        return measured & self.keys, claimed & self.keys

    def measurement(self, key: str) -> MeasurementRow | None:
        """The stored measurement of a strategy. A trial's never changes: it is read once.
        A key the last ``progress`` did not list is taken as unmeasured (the claim checks)."""
        if key not in self._measurements and self._seen is not None and key not in self._seen:
            return None
        row = self._measurements.get(key) or self.store.measurement(self.name, key)
        if row is not None and row.trial_number is not None:
            self._measurements[key] = row
        return row

    def measure(self, strategy: Strategy) -> Measurement:
        spec = self.spec
        return runner.measure(spec.model, spec.workload, strategy, spec.settings)

    def baseline(self) -> Measurement:
        """The eager baseline, measured once per study (by whichever worker claims it)."""
        if self._baseline is not None:
            return self._baseline
        deadline = time.monotonic() + self.spec.settings.timeout_s + 2 * GRACE_S
        while (row := self.store.measurement(self.name, "none")) is None:
            verdict = self.store.claim(self.name, "none", None, self.worker, 1, set())
            if verdict == "claimed":
                m = self.measure(Strategy.create("none"))
                self.store.add_measurement(self.name, "none", None, m.to_dict())
                continue
            if time.monotonic() > deadline:  # its worker died: take it over
                self.store.release_key(self.name, "none")
            time.sleep(POLL_S)
        m = Measurement.from_dict(row.payload)
        if not m.ok:
            raise AutotuneError(f"the eager baseline did not run ({m.status}): {m.reason}")
        self._baseline = m
        return m

    def tell(self, trial: optuna.trial.Trial, m: Measurement, repeat_of: int | None) -> None:
        """Tell Optuna, retried until it is stored (a finished measurement is never lost)."""
        self._end(lambda: self._tell(trial, m, repeat_of))

    def _end(self, tell: Callable[[], None]) -> None:
        import optuna

        # ended already: a retried commit that had landed, or failed as stale by a peer
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            self._db(tell, "tell")

    def _tell(self, trial: optuna.trial.Trial, m: Measurement, repeat_of: int | None) -> None:
        import optuna

        # few attributes: Optuna writes each one in a transaction of its own
        trial.set_user_attr("key", Strategy.from_dict(m.strategy).key)
        details = {"strategy": m.strategy, "status": m.status, "worker": self.worker}
        if repeat_of is not None:
            trial.set_user_attr("repeat_of", repeat_of)
        if not m.ok:
            trial.set_user_attr("reason", m.reason[:2000])
            trial.set_user_attr("autotune", details)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            return
        details.update(speedup=m.speedup, latency_ms_measured=m.latency and m.latency.median_ms)
        trial.set_user_attr("autotune", details)
        trial.set_constraint("accuracy", 0.0 if m.feasible else 1.0)
        if self.spec.max_memory_mb is not None and m.memory is not None:
            trial.set_constraint("memory", m.memory.compiled_peak_mb - self.spec.max_memory_mb)
        base = self.baseline()
        baseline_ms = base.latency.median_ms if base.latency else None
        values = objective_values(m, self.spec.objectives, baseline_ms)
        self.study.tell(trial, values, skip_if_finished=True)

    def step(self, on_strategy: Callable[[str], None] = print) -> tuple[Strategy, str]:
        """Ask for one trial and answer it. Returns the strategy and what happened:
        ``measured``, ``repeat`` (stored values reused), or ``taken`` (another worker's)."""
        import optuna

        with self.trials.one_read():  # Optuna and the sampler read the trials once
            trial = self._db(self.study.ask, "ask")
            try:
                strategy = self._db(lambda: self.spec.space.suggest(trial), "suggest")
            except BaseException:
                self._abandon(trial)
                raise
        beat = None
        try:
            row = self.measurement(strategy.key)
            if row is not None and row.trial_number is not None:
                on_strategy(f"repeat {strategy.key}")
                self.tell(trial, Measurement.from_dict(row.payload), row.trial_number)
                return strategy, "repeat"
            if row is not None:  # the baseline, measured before any trial: this trial is it
                m = Measurement.from_dict(row.payload)
                if self.store.adopt(self.name, strategy.key, trial.number):
                    self.tell(trial, m, None)
                    return strategy, "measured"
                first = self.store.measurement(self.name, strategy.key)  # another worker's
                self.tell(trial, m, first.trial_number if first else None)
                return strategy, "repeat"
            beat = self._db(lambda: Heartbeat(self.study, trial), "heartbeat")  # + its params
            target = min(self.spec.trials, len(self.members))
            verdict = self.store.claim(
                self.name, strategy.key, trial.number, self.worker, target, self.keys
            )
            if verdict != "claimed":
                why = "taken by another worker" if verdict == "taken" else "the budget is spent"

                def skip() -> None:
                    trial.set_user_attr("key", strategy.key)
                    trial.set_user_attr("skipped", why)
                    self.study.tell(trial, state=optuna.trial.TrialState.PRUNED,
                                    skip_if_finished=True)  # fmt: skip

                self._end(skip)
                return strategy, "taken"
            on_strategy(f"measuring {strategy.key}")
            m = self.measure(strategy)
            self.store.add_measurement(self.name, strategy.key, trial.number, m.to_dict())
            self.tell(trial, m, None)
            return strategy, "measured"
        except BaseException:
            self._abandon(trial)
            raise
        finally:
            if beat is not None:
                beat.stop()

    def _abandon(self, trial: optuna.trial.Trial) -> None:
        """Fail a trial interrupted before its measurement was stored, and free its strategy
        (best effort: the heartbeat covers the rest)."""
        import optuna

        with contextlib.suppress(Exception):
            trial.set_user_attr("reason", "interrupted before it was measured")
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            self.store.release(self.name, trial.number)

    def enqueue_unclaimed(self, all_of_them: bool = False) -> None:
        """Queue strategies nobody has taken: all (grid), or one at random (sampler stuck)."""
        from autotune.space import Space

        _, taken = self.progress()
        left = [s for s in self.members if s.key not in taken]
        for s in left if all_of_them else self.rng.sample(left, min(1, len(left))):
            params = Space.params(s)
            self._db(lambda p=params: self.study.enqueue_trial(p, skip_if_exists=True), "enqueue")

    def run(self, progress: bool = True, max_measure: int | None = None) -> Outcome:
        """Measure the baseline, then trials until the budget, time or space runs out (or,
        with ``max_measure``, until this process has measured that many)."""
        import optuna

        start = time.monotonic()
        self.baseline()
        if "none" in self.keys and self.store.measurement(self.name, "none").trial_number is None:
            none = {"granularity": "none"}
            self._db(lambda: self.study.enqueue_trial(none, skip_if_exists=True), "enqueue")
        if self.spec.sampler == "grid":
            self.enqueue_unclaimed(all_of_them=True)
        target = min(self.spec.trials, len(self.members))
        bar = Progress(target, len(self.measured()), progress)
        measured = repeats = in_a_row = 0
        stopped = "budget"
        checked = 0.0
        try:
            while True:
                if time.monotonic() - checked >= HEARTBEAT_S:  # dead workers' trials
                    self._db(lambda: optuna.storages.fail_stale_trials(self.study), "stale check")
                    checked = time.monotonic()
                measured_keys, claimed_keys = self.progress()
                done = len(measured_keys)
                if done >= target:
                    stopped = "exhausted" if done >= len(self.members) else "budget"
                    break
                if max_measure is not None and measured >= max_measure:
                    stopped = "worker limit"
                    break
                limit = self.spec.time_budget_s
                if limit is not None and time.monotonic() - start >= limit:
                    stopped = "time"
                    break
                if len(claimed_keys) >= target:  # the rest is in other workers' hands
                    bar.now("waiting for other workers")
                    time.sleep(POLL_S)
                    continue
                if in_a_row >= MAX_REPEATS_IN_A_ROW:
                    self.enqueue_unclaimed()
                    in_a_row = 0
                strategy, what = self.step(bar.now)
                repeats += what == "repeat"
                measured += what == "measured"
                in_a_row = 0 if what == "measured" else in_a_row + 1
                if what == "measured" and progress:  # the best so far costs a full read
                    bar.advance(len(self.measured()), strategy.key, self.best_so_far())
        except KeyboardInterrupt:
            stopped = "interrupted"
        finally:
            bar.close()
        return Outcome(self.name, measured, repeats, stopped)

    def best_so_far(self) -> str:
        from autotune.export import candidates, pick

        points = candidates(self.store, self.name)
        try:
            best = pick(points, self.spec.policy, self.spec.objectives)
        except AutotuneError:
            return "—"
        return f"{best.key} ({best.compile_s:.1f} s, {best.latency_ms:.3g} ms)"


class Progress:
    """A live bar: trial n of N, elapsed time, the current strategy, the best so far."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, initial=initial, disable=not enabled, unit="trial",
            bar_format="{n}/{total} trials |{bar:20}| {elapsed} {postfix}", dynamic_ncols=True,
        )  # fmt: skip
        self.best = "—"
        self.stop = threading.Event()
        self.ticker = threading.Thread(target=self._tick, daemon=True)
        if enabled and sys.stderr.isatty():  # a live clock only where it redraws in place
            self.ticker.start()

    def _tick(self) -> None:
        while not self.stop.wait(1.0):
            self.bar.refresh()

    def now(self, what: str) -> None:
        self.bar.set_postfix_str(f"{what} | best {self.best}", refresh=True)

    def advance(self, done: int, key: str, best: str) -> None:
        self.best = best
        self.bar.set_postfix_str(f"last {key} | best {best}", refresh=False)
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        self.stop.set()
        self.bar.close()


def overview(store: Store) -> list[dict[str, Any]]:
    """Every study in the storage with its progress: measured strategies against the budget."""
    rows = []
    for study in store.studies():
        measured = store.measurements(study.name)
        statuses = [m.status for m in measured]
        last = max((m.created_at for m in measured), default=study.created_at)
        rows.append({
            "study": study.name,
            "model": (study.spec.get("model") or {}).get("name"),
            "measured": len(measured),
            "budget": study.spec.get("trials"),
            "ok": statuses.count("ok"),
            "failed": len(statuses) - statuses.count("ok"),
            "runs": len(store.runs(study.name)),
            "live workers": live_workers(store.url, study.name),
            "last": last.isoformat(timespec="seconds") if last else "",
        })  # fmt: skip
    return rows


def submit(spec: StudySpec, storage: str | None) -> str:
    """Create a study with its whole spec, for workers to join later; return its name.

    Its environment is left open: the first worker to join sets it, and later workers must
    match it. The default name leaves the hardware out, since the submitter may have none.
    """
    store = Store(storage)
    name = spec.study or f"{spec.model.slug()}-{spec.workload.slug()}"
    if store.study(name) is not None:
        raise ConfigError(f"a study named {name!r} exists already in {mask(store.url)}")
    members = spec.space.validate(spec.workload.device)
    store.add_study(name, spec.to_dict(), {})
    open_study(TrialStorage(store.url), name, spec, len(members))
    return name


def join(
    name: str, storage: str | None, *, device: str | None = None, force: bool = False
) -> Search:
    """A worker's search on an existing study: everything comes from the storage."""
    import dataclasses

    from autotune.workload import Workload

    store = Store(storage, create=False)
    row = store.study(name)
    if row is None:
        raise ConfigError(f"no study named {name!r} in {mask(store.url)}")
    spec = StudySpec.from_dict(row.spec)
    if device is not None:
        workload = Workload.create(**{**spec.workload.to_dict(), "device": device})
        spec = dataclasses.replace(spec, workload=workload)
    return Search(spec, storage, force=force, name=name, save_spec=False)
