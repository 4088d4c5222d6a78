"""The ledger: one transaction on a study's claims and measurements, in plain verbs.

:mod:`autotune.coordination` decides what to claim, store, adopt and reap; this is the only
place that knows how those rows are read and written (the database's clock included, so that
every worker's heartbeat is stamped by one clock).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, delete, literal_column, select, update
from sqlalchemy.orm import Session

from autotune.storage import records
from autotune.storage.records import Claim, Stored
from autotune.storage.schema import ClaimRow, MeasurementRow, StudyRow

_EPOCH = {  # the database's clock, in seconds since the epoch
    "postgresql": "extract(epoch from clock_timestamp())",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}


def clock(session: Session) -> Any:
    """The database's clock as a column expression, in seconds since the epoch."""
    return literal_column(_EPOCH.get(session.get_bind().dialect.name, "0.0"), Float)


class Ledger:
    """A study's claims and measurements inside one open transaction."""

    def __init__(self, session: Session, study: str) -> None:
        self.s, self.study = session, study
        self.clock = clock(session)

    def lock(self) -> None:
        """Serialise this study's locked transactions (a row lock on a server, the write lock
        on SQLite)."""
        self.s.execute(
            update(StudyRow).where(StudyRow.name == self.study).values(name=StudyRow.name)
        )

    def now(self) -> float:
        """The database clock, in seconds since the epoch."""
        return float(self.s.execute(select(self.clock)).scalar_one())

    # claims
    def claims(self) -> list[Claim]:
        query = select(ClaimRow).where(ClaimRow.study == self.study).order_by(ClaimRow.id)
        return [records.claim(r) for r in self.s.scalars(query)]

    def claims_and_now(self) -> tuple[list[Claim], float]:
        """Every claim, and the database clock, in one query."""
        rows = self.s.execute(
            select(ClaimRow, self.clock).where(ClaimRow.study == self.study)
        ).all()
        now = float(rows[0][1]) if rows else self.now()
        return [records.claim(r) for r, _ in rows], now

    def claim(self, key: str) -> Claim | None:
        row = self._claim_row(key)
        return None if row is None else records.claim(row)

    def add_claim(self, key: str, trial_number: int | None, worker: str, beating: bool) -> None:
        """Take ``key`` for ``worker`` (``beating``: its measurement is in flight now)."""
        self.s.add(ClaimRow(study=self.study, key=key, trial_number=trial_number, worker=worker,
                            heartbeat=self.clock if beating else None))  # fmt: skip

    def delete_claims(self, key: str, worker: str | None = None) -> None:
        where = [ClaimRow.study == self.study, ClaimRow.key == key]
        if worker is not None:
            where.append(ClaimRow.worker == worker)
        self.s.execute(delete(ClaimRow).where(*where))

    def stop_beating(self, key: str, worker: str) -> None:
        """The claim's trial is told: its heartbeat stops."""
        self.s.execute(update(ClaimRow).where(
            ClaimRow.study == self.study, ClaimRow.key == key, ClaimRow.worker == worker,
        ).values(heartbeat=None))  # fmt: skip

    def beat(self, worker: str) -> int:
        """Stamp the heartbeat of ``worker``'s claims in flight; how many there are."""
        done = self.s.execute(update(ClaimRow).where(
            ClaimRow.study == self.study, ClaimRow.worker == worker,
            ClaimRow.heartbeat.is_not(None),
        ).values(heartbeat=self.clock))  # fmt: skip
        return int(done.rowcount)

    def live_workers(self, grace_s: float) -> set[str]:
        """Workers with a claim beaten within ``grace_s``."""
        fresh = ClaimRow.heartbeat >= self.clock - grace_s
        query = select(ClaimRow.worker).where(ClaimRow.study == self.study, fresh)
        return set(self.s.scalars(query))

    def settle_silent(self, claim_id: int, grace_s: float, keep: bool) -> bool:
        """If claim ``claim_id`` is still silent for ``grace_s``: delete it, or with ``keep``
        stop its heartbeat (its measurement is stored). Whether it was silent."""
        silent = (ClaimRow.id == claim_id, ClaimRow.heartbeat < self.clock - grace_s)
        if keep:
            done = self.s.execute(update(ClaimRow).where(*silent).values(heartbeat=None))
        else:
            done = self.s.execute(delete(ClaimRow).where(*silent))
        return bool(done.rowcount)

    # measurements
    def measurement(self, key: str) -> Stored | None:
        row = self._measurement_row(key)
        return None if row is None else records.stored(row)

    def measurement_states(self) -> list[tuple[str, int | None, str | None]]:
        """(key, trial_number, deduced_from) of every stored measurement: no payloads read."""
        return [tuple(r) for r in self.s.execute(  # type: ignore[misc]
            select(MeasurementRow.key, MeasurementRow.trial_number, MeasurementRow.deduced_from)
            .where(MeasurementRow.study == self.study)
        ).all()]  # fmt: skip

    def add_measurement(
        self, key: str, trial_number: int | None, payload: dict[str, Any], worker: str | None,
        deduced_from: str | None,
    ) -> None:  # fmt: skip
        self.s.add(MeasurementRow(study=self.study, key=key, trial_number=trial_number,
                                  status=payload["status"], payload=payload, worker=worker,
                                  deduced_from=deduced_from))  # fmt: skip
        self.s.flush()  # a peer's row with the same key fails here, inside the transaction

    def delete_measurement(self, key: str) -> None:
        row = self._measurement_row(key)
        if row is not None:
            self.s.delete(row)

    def set_trial_number(self, key: str, number: int | None, *, was: Any = ...) -> int:
        """Give the measurement of ``key`` to trial ``number`` (None: to no trial), only where
        its trial number is ``was`` when given; how many rows changed (0 or 1)."""
        where = [MeasurementRow.study == self.study, MeasurementRow.key == key]
        if was is None:
            where.append(MeasurementRow.trial_number.is_(None))
        elif was is not ...:
            where.append(MeasurementRow.trial_number == was)
        done = self.s.execute(update(MeasurementRow).where(*where).values(trial_number=number))
        return int(done.rowcount)

    def _claim_row(self, key: str) -> ClaimRow | None:
        query = select(ClaimRow).where(ClaimRow.study == self.study, ClaimRow.key == key)
        return self.s.scalars(query).first()

    def _measurement_row(self, key: str) -> MeasurementRow | None:
        query = select(MeasurementRow).where(
            MeasurementRow.study == self.study, MeasurementRow.key == key
        )
        return self.s.scalars(query).first()
