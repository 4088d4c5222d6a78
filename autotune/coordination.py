"""Coordination: what the processes that share a study agree on through its database.

- **Claims.** A worker takes a strategy before measuring it, in one transaction with the check
  of the study's budget; a retried commit recognises its own claim.
- **Liveness.** A claim in flight carries a heartbeat, the database clock's time of its
  worker's last beat (:class:`Pulse`, every ``HEARTBEAT_S``).
- **Reaping.** A claim silent for ``GRACE_S`` belongs to a dead, frozen or cut-off worker: a
  live worker fails its trial through Optuna's public ``tell`` and hands the strategy back. A
  worker reaps only after it has itself reached the database for ``GRACE_S`` in a row, so a
  database outage, which silences everyone, reaps no one.
- **Adoption.** A measurement stored without a live trial (the eager baseline, measured before
  any trial, or the result of a worker that came back after its trial was failed) is adopted
  by exactly one later trial, so every measurement ends as one COMPLETE trial.
- **Local workers** for ``search --workers K``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Float, delete, literal_column, select, update
from sqlalchemy.exc import IntegrityError

from autotune.errors import ConfigError
from autotune.store import ClaimRow, MeasurementRow, Store, StudyRow, resilient

if TYPE_CHECKING:
    import optuna
    from sqlalchemy.orm import Session

HEARTBEAT_S = float(os.environ.get("AUTOTUNE_HEARTBEAT_S", "5"))
GRACE_S = float(os.environ.get("AUTOTUNE_GRACE_S", "30"))
REAP_S = max(HEARTBEAT_S, GRACE_S / 3)  # how often a worker looks for dead workers' trials
# The fields of the environment that make measurements comparable (the device by its kind).
COMPARABLE = ("torch", "cuda", "device", "device_name")
_EPOCH = {  # the database's clock, in seconds since the epoch
    "postgresql": "extract(epoch from clock_timestamp())",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}


def comparable(environment: dict[str, Any]) -> dict[str, Any]:
    """The fields that must agree, with ``cuda:1`` read as ``cuda`` (the index is no hardware)."""
    values = {k: environment.get(k) for k in COMPARABLE}
    values["device"] = str(values["device"] or "").partition(":")[0] or None
    return values


def check_environment(stored: dict[str, Any], here: dict[str, Any], force: bool) -> None:
    """Refuse to mix measurements from another GPU, CPU or torch, unless forced."""
    a, b = comparable(stored), comparable(here)
    differ = [k for k in COMPARABLE if a[k] != b[k]]
    if differ and not force:
        detail = ", ".join(f"{k}: study {a[k]!r} vs here {b[k]!r}" for k in differ)
        raise ConfigError(
            f"this machine differs from the study's ({detail}); mixed measurements would be "
            "meaningless (use --force to join anyway)"
        )


@dataclass(frozen=True)
class Tally:
    """A study's strategies: measured, measured but no trial's yet, and claimed (measured or
    being measured)."""

    measured: frozenset[str]
    unadopted: frozenset[str]
    claimed: frozenset[str]


class Coordinator:
    """One worker's handle on what the workers of a study share."""

    def __init__(self, store: Store, study: str, worker: str) -> None:
        self.store, self.study, self.worker = store, study, worker
        self.url, self.retry = store.url, store.retry  # for @resilient
        epoch = _EPOCH.get(store.engine.dialect.name)
        self._clock = literal_column(epoch, Float) if epoch else None
        self.pulse = Pulse(self)
        self._suspects: dict[int, float] = {}  # running trials with no claim, first seen

    def _now(self) -> Any:
        return self._clock if self._clock is not None else time.time()

    def _lock(self, s: Session) -> None:
        """Serialise this study's claims (a row lock on a server, the write lock on SQLite)."""
        s.execute(update(StudyRow).where(StudyRow.name == self.study).values(name=StudyRow.name))

    def _claim_of(self, s: Session, key: str) -> ClaimRow | None:
        query = select(ClaimRow).where(ClaimRow.study == self.study, ClaimRow.key == key)
        return s.scalars(query).first()

    def _measurement(self, s: Session, key: str) -> MeasurementRow | None:
        query = select(MeasurementRow).where(
            MeasurementRow.study == self.study, MeasurementRow.key == key
        )
        return s.scalars(query).first()

    # claims
    @resilient
    def claim(self, key: str, trial_number: int | None, budget: int, counted: set[str]) -> str:
        """Take ``key``: ``claimed``, ``taken`` (by another) or ``budget`` (spent)."""
        with self.store.session() as s:
            self._lock(s)
            query = select(ClaimRow).where(ClaimRow.study == self.study)
            held = {c.key: c for c in s.scalars(query)}
            mine = held.get(key)
            if mine is not None:  # ours, if a retried commit had landed
                ours = mine.worker == self.worker and mine.trial_number == trial_number
                return "claimed" if ours else "taken"
            if len(held.keys() & counted) >= budget and key in counted:
                return "budget"
            s.add(ClaimRow(study=self.study, key=key, trial_number=trial_number,
                           worker=self.worker, heartbeat=self._now()))  # fmt: skip
        return "claimed"

    @resilient
    def record(self, key: str, trial_number: int | None, payload: dict[str, Any]) -> str:
        """Store this worker's measurement of ``key``: ``stored`` (as its trial's),
        ``unadopted`` (its claim was reaped: kept for a later trial to adopt) or ``duplicate``
        (another worker's is stored; this one is dropped)."""
        try:
            with self.store.session() as s:
                self._lock(s)
                found = self._measurement(s, key)
                if found is not None:  # another's, or ours if a retried commit had landed
                    if found.worker != self.worker:
                        return "duplicate"
                    return "stored" if found.trial_number == trial_number else "unadopted"
                claim = self._claim_of(s, key)
                ours = claim is not None and claim.worker == self.worker
                if claim is None:  # reaped: hold it again, so nobody measures it anew
                    s.add(ClaimRow(study=self.study, key=key, trial_number=None,
                                   worker=self.worker))  # fmt: skip
                number = trial_number if ours and claim.trial_number == trial_number else None
                s.add(MeasurementRow(study=self.study, key=key, trial_number=number,
                                     status=payload["status"], payload=payload,
                                     worker=self.worker))  # fmt: skip
                return "stored" if number is not None or trial_number is None else "unadopted"
        except IntegrityError:  # a peer's insert won the unique key first
            return "duplicate"

    @resilient
    def done(self, key: str) -> None:
        """The claim's trial is told: its heartbeat stops."""
        with self.store.session() as s:
            s.execute(update(ClaimRow).where(
                ClaimRow.study == self.study, ClaimRow.key == key, ClaimRow.worker == self.worker
            ).values(heartbeat=None))  # fmt: skip

    @resilient
    def release(self, key: str) -> None:
        """Give back this worker's claim on an unmeasured strategy (an interrupted trial)."""
        with self.store.session() as s:
            self._lock(s)
            if self._measurement(s, key) is None:
                s.execute(delete(ClaimRow).where(
                    ClaimRow.study == self.study, ClaimRow.key == key,
                    ClaimRow.worker == self.worker,
                ))  # fmt: skip

    @resilient
    def adopt(self, key: str, trial_number: int) -> bool:
        """Make a measurement with no trial this trial's, atomically: of several workers asking
        at once, exactly one gets True."""
        with self.store.session() as s:
            done = s.execute(
                update(MeasurementRow)
                .where(MeasurementRow.study == self.study, MeasurementRow.key == key,
                       MeasurementRow.trial_number.is_(None))
                .values(trial_number=trial_number)
            )  # fmt: skip
            return done.rowcount == 1

    @resilient
    def unadopt(self, key: str, trial_number: int) -> None:
        """The trial of a stored measurement was failed (by a reaper): free it for adoption."""
        with self.store.session() as s:
            s.execute(
                update(MeasurementRow)
                .where(MeasurementRow.study == self.study, MeasurementRow.key == key,
                       MeasurementRow.trial_number == trial_number)
                .values(trial_number=None)
            )  # fmt: skip

    @resilient
    def tally(self, keys: set[str]) -> Tally:
        """What is measured, unadopted and claimed among ``keys``: two small queries."""
        with self.store.session() as s:
            rows = s.execute(
                select(MeasurementRow.key, MeasurementRow.trial_number)
                .where(MeasurementRow.study == self.study)
            ).all()  # fmt: skip
            claimed = set(s.scalars(select(ClaimRow.key).where(ClaimRow.study == self.study)))
        measured = {k for k, _ in rows} & keys
        unadopted = {k for k, n in rows if n is None} & keys
        claimed = (claimed & keys) | measured
        return Tally(frozenset(measured), frozenset(unadopted), frozenset(claimed))

    @resilient
    def forget_failed_baseline(self) -> str | None:
        """Delete a failed eager baseline that no trial adopted (a timeout, OOM or crash is
        retried on resume); return its reason, or None when there was none."""
        with self.store.session() as s:
            self._lock(s)
            row = self._measurement(s, "none")
            if row is None or row.status == "ok" or row.trial_number is not None:
                return None
            s.delete(row)
            s.execute(delete(ClaimRow).where(ClaimRow.study == self.study, ClaimRow.key == "none"))
            return f"{row.status}: {row.payload.get('reason', '')}".strip()

    # liveness
    def beat(self) -> int:
        """Renew the heartbeat of this worker's claims in flight; how many there are. One try:
        the pulse beats again soon, and must see an outage as one."""
        with self.store.session() as s:
            done = s.execute(update(ClaimRow).where(
                ClaimRow.study == self.study, ClaimRow.worker == self.worker,
                ClaimRow.heartbeat.is_not(None),
            ).values(heartbeat=self._now()))  # fmt: skip
            return done.rowcount

    @resilient
    def live_workers(self) -> int:
        """Workers measuring right now: those with a claim beaten within ``GRACE_S``."""
        with self.store.session() as s:
            fresh = ClaimRow.heartbeat >= self._now() - GRACE_S
            query = select(ClaimRow.worker).where(ClaimRow.study == self.study, fresh)
            return len(set(s.scalars(query)))

    # reaping
    def reap(self, study: optuna.Study, own: set[int] | None = None) -> int:
        """Fail the trials of workers silent for ``GRACE_S`` and hand their strategies back;
        also fail running trials that never claimed a strategy (a worker that died between
        asking and claiming). Returns how many trials it ended."""
        if not self.pulse.steady():
            return 0
        stale, numbers = self._stale()
        ended = 0
        for claim in stale:
            told = False
            if claim.trial_number is not None:
                told = _fail(study, claim.trial_number) == "COMPLETE"
                ended += not told
            self._reclaim(claim, told)
        ended += self._orphans(study, numbers | (own or set()))
        return ended

    @resilient
    def _stale(self) -> tuple[list[ClaimRow], set[int]]:
        with self.store.session() as s:
            rows = list(s.scalars(select(ClaimRow).where(ClaimRow.study == self.study)))
            now = s.execute(select(self._clock)).scalar() if self._clock is not None else None
        threshold = (now if now is not None else time.time()) - GRACE_S
        stale = [c for c in rows if c.worker != self.worker and c.heartbeat is not None
                 and c.heartbeat < threshold]  # fmt: skip
        return stale, {c.trial_number for c in rows if c.trial_number is not None}

    @resilient
    def _reclaim(self, claim: ClaimRow, told: bool) -> None:
        """Hand a dead worker's strategy back (or, if it was measured, keep the measurement
        for adoption): only if the claim is still silent, checked under the study's lock."""
        with self.store.session() as s:
            self._lock(s)
            silent = (ClaimRow.id == claim.id, ClaimRow.heartbeat < self._now() - GRACE_S)
            found = self._measurement(s, claim.key)
            if found is None:
                s.execute(delete(ClaimRow).where(*silent))
                return
            s.execute(update(ClaimRow).where(*silent).values(heartbeat=None))
            number = claim.trial_number
            if not told and number is not None and found.trial_number == number:
                found.trial_number = None  # its trial failed: a later trial adopts it

    def _orphans(self, study: optuna.Study, claimed: set[int]) -> int:
        from optuna.trial import TrialState

        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        now = time.monotonic()
        seen = {t.number for t in running if t.number not in claimed}
        self._suspects = {n: self._suspects.get(n, now) for n in seen}
        ended = 0
        for number, since in self._suspects.items():
            if now - since >= GRACE_S:
                ended += _fail(study, number) == "FAIL"
        return ended


def _fail(study: optuna.Study, number: int) -> str:
    """Fail a trial unless it has ended; the state it ends in."""
    from optuna.trial import TrialState

    return study.tell(number, state=TrialState.FAIL, skip_if_finished=True).state.name


class Pulse:
    """A thread that beats this worker's claims every ``HEARTBEAT_S`` and knows for how long
    the database has answered in a row."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.since: float | None = time.monotonic()  # reached the database (at start-up)
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def steady(self) -> bool:
        """Has this worker reached the database for ``GRACE_S`` in a row?"""
        return self.since is not None and time.monotonic() - self.since >= GRACE_S

    def _run(self) -> None:
        while not self.stop_event.wait(HEARTBEAT_S):
            self.beat()

    def beat(self) -> None:
        try:
            self.coordinator.beat()
        except Exception:  # cut off: the reaper waits GRACE_S after the database is back
            self.since = None
            return
        if self.since is None:
            self.since = time.monotonic()

    def __enter__(self) -> Pulse:
        if self.thread is None:
            self.stop_event.clear()
            self.thread = threading.Thread(target=self._run, daemon=True, name="autotune-pulse")
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join()
            self.thread = None


class LocalWorkers:
    """``search --workers K``: K worker processes on this machine, one per GPU where there
    are GPUs, joined to the study through its storage URL (passed in the environment, which
    ``ps`` does not show)."""

    def __init__(self, study: str, url: str, devices: list[str]) -> None:
        env = {**os.environ, "AUTOTUNE_STORAGE": url}
        argv = [sys.executable, "-m", "autotune.cli", "worker", "--study", study, "--no-progress"]
        self.procs = [
            subprocess.Popen([*argv, "--device", d], stdin=subprocess.DEVNULL, env=env)
            for d in devices
        ]

    @staticmethod
    def devices(device: str, count: int) -> list[str]:
        """``cuda:0``, ``cuda:1``, … round the visible GPUs; the same CPU for every worker."""
        if count < 1:
            raise ConfigError("--workers must be at least 1")
        if not device.startswith("cuda"):
            return [device] * count
        import torch

        return [f"cuda:{i % torch.cuda.device_count()}" for i in range(count)]

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        """Each worker stops as cleanly as on Ctrl-C."""
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()

    def failures(self) -> list[int]:
        return [p.returncode for p in self.procs if p.returncode != 0]
