"""Claims: how workers take strategies, store what they measured, adopt measurements that no
trial holds, and reap the trials of workers that went silent."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Float, delete, literal_column, select, update
from sqlalchemy.exc import IntegrityError

from autotune.coordination import liveness
from autotune.coordination.liveness import Pulse
from autotune.store import ClaimRow, MeasurementRow, Store, StudyRow, resilient

if TYPE_CHECKING:
    import optuna
    from sqlalchemy.orm import Session

_EPOCH = {  # the database's clock, in seconds since the epoch
    "postgresql": "extract(epoch from clock_timestamp())",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}


@dataclass(frozen=True)
class Tally:
    """A study's strategies: measured, measured but no trial's yet, and claimed (measured or
    being measured)."""

    measured: frozenset[str]
    unadopted: frozenset[str]
    claimed: frozenset[str]
    stale: tuple[ClaimRow, ...] = ()  # other workers' claims silent for GRACE_S
    numbers: frozenset[int] = frozenset()  # the trials that hold a claim
    deduced: frozenset[str] = frozenset()  # settled without measuring (autotune.deduction)

    @property
    def spent(self) -> int:
        """Strategies measured or being measured: what the trial budget counts."""
        return len(self.claimed - self.deduced)


class Coordinator:
    """One worker's handle on what the workers of a study share."""

    def __init__(self, store: Store, study: str, worker: str) -> None:
        self.store, self.study, self.worker = store, study, worker
        self.url, self.retry = store.url, store.retry  # for @resilient
        epoch = _EPOCH.get(store.engine.dialect.name)
        self._clock = literal_column(epoch, Float) if epoch else None
        self.pulse = Pulse(self)
        self._suspects: dict[int, float] = {}  # running trials with no claim, first seen
        self._looked = 0.0  # when the running trials were last read (that read is not cheap)

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
    def record(
        self, key: str, trial_number: int | None, payload: dict[str, Any],
        deduced_from: str | None = None,
    ) -> str:  # fmt: skip
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
                                     worker=self.worker, deduced_from=deduced_from))  # fmt: skip
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
        """What is measured, unadopted and claimed among ``keys``, and which claims are silent:
        two small queries (the claims come with the database's clock)."""
        clock = self._clock if self._clock is not None else literal_column("0.0", Float)
        with self.store.session() as s:
            rows = s.execute(
                select(MeasurementRow.key, MeasurementRow.trial_number,
                       MeasurementRow.deduced_from)
                .where(MeasurementRow.study == self.study)
            ).all()  # fmt: skip
            claims = s.execute(select(ClaimRow, clock).where(ClaimRow.study == self.study)).all()
        now = claims[0][1] if claims and self._clock is not None else time.time()
        silent = now - liveness.GRACE_S
        stale = tuple(c for c, _ in claims if c.worker != self.worker
                      and c.heartbeat is not None and c.heartbeat < silent)  # fmt: skip
        measured = {k for k, _, _ in rows} & keys
        unadopted = {k for k, n, _ in rows if n is None} & keys
        deduced = {k for k, _, d in rows if d is not None} & keys
        claimed = ({c.key for c, _ in claims} & keys) | measured
        numbers = frozenset(c.trial_number for c, _ in claims if c.trial_number is not None)
        return Tally(frozenset(measured), frozenset(unadopted), frozenset(claimed), stale, numbers,
                     frozenset(deduced))  # fmt: skip

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
            fresh = ClaimRow.heartbeat >= self._now() - liveness.GRACE_S
            query = select(ClaimRow.worker).where(ClaimRow.study == self.study, fresh)
            return len(set(s.scalars(query)))

    # reaping
    def reap(self, study: optuna.Study, tally: Tally, own: set[int] | None = None) -> int:
        """Fail the trials of workers silent for ``GRACE_S`` (as ``tally`` saw them) and hand
        their strategies back; also fail running trials that never claimed a strategy (a
        worker that died between asking and claiming). Returns how many trials it ended."""
        if not self.pulse.steady():
            return 0
        ended = 0
        for claim in tally.stale:
            told = False
            if claim.trial_number is not None:
                told = _fail(study, claim.trial_number) == "COMPLETE"
                ended += not told
            self._reclaim(claim, told)
        ended += self._orphans(study, set(tally.numbers) | (own or set()))
        return ended

    @resilient
    def _reclaim(self, claim: ClaimRow, told: bool) -> None:
        """Hand a dead worker's strategy back (or, if it was measured, keep the measurement
        for adoption): only if the claim is still silent, checked under the study's lock."""
        with self.store.session() as s:
            self._lock(s)
            silent = (ClaimRow.id == claim.id, ClaimRow.heartbeat < self._now() - liveness.GRACE_S)
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

        now = time.monotonic()
        if now - self._looked < liveness.GRACE_S / 2:
            return 0
        self._looked = now
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        seen = {t.number for t in running if t.number not in claimed}
        self._suspects = {n: self._suspects.get(n, now) for n in seen}
        ended = 0
        for number, since in self._suspects.items():
            if now - since >= liveness.GRACE_S:
                ended += _fail(study, number) == "FAIL"
        return ended


def _fail(study: optuna.Study, number: int) -> str:
    """Fail a trial unless it has ended; the state it ends in."""
    from optuna.trial import TrialState

    return study.tell(number, state=TrialState.FAIL, skip_if_finished=True).state.name
