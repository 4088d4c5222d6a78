"""The store: autotune's tables in one database, reached through plain records.

Every database error becomes a one-line ``StorageError`` (its ``transient`` flag says whether a
retry may mend it); a lost connection is waited out once ``retry`` is set (:mod:`.retry`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from autotune import variables
from autotune.errors import StorageError
from autotune.storage import records, schema
from autotune.storage.engine import connect, line
from autotune.storage.ledger import Ledger
from autotune.storage.records import ExportRecord, RunRecord, Stored, StoredStudy
from autotune.storage.retry import final_reason, resilient, transient
from autotune.storage.schema import (
    ConfirmationRow,
    ExportRow,
    MeasurementRow,
    ReferenceRow,
    RunRow,
    StudyRow,
)
from autotune.storage.urls import mask, resolve_url, scrub, sqlite_path


class Store:
    """autotune's tables in one database. ``retry``, set once a search runs, makes every
    method outlast a lost connection (the one flag: coordination reads it from here)."""

    def __init__(self, url: str | None = None, *, create: bool = True) -> None:
        self.retry = False
        self._found = False  # autotune's tables seen in the database
        self.url = resolve_url(url)
        parsed = make_url(self.url)
        sqlite = parsed.get_backend_name() == "sqlite"
        if not create and sqlite and not Path(sqlite_path(parsed)).is_file():
            raise StorageError(f"no study database at {sqlite_path(parsed)}")
        if create and self.url == variables.default_storage():
            Path(sqlite_path(parsed)).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = connect(self.url)
        except ImportError as exc:
            raise StorageError(
                f"storage {mask(self.url)}: its database driver is not installed ({exc.name})"
            ) from None
        except (SQLAlchemyError, ValueError, TypeError) as exc:
            raise StorageError(f"storage {mask(self.url)}: {scrub(line(exc), self.url)}") from None
        with self.session() as s:  # reach the server now: fail early, with one clear line
            s.connection()
        schema.prepare(self.engine, self.session, create, mask(self.url))

    def __repr__(self) -> str:
        return f"Store({mask(self.url)!r})"

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction; commits on success, turns database errors into ``StorageError``."""
        try:
            with Session(self.engine, expire_on_commit=False) as s, s.begin():
                yield s
        except IntegrityError:
            raise
        except SQLAlchemyError as exc:
            why = final_reason(exc)
            message = f"{why}: {line(exc)}" if why else line(exc)
            error = StorageError(f"storage {mask(self.url)}: {scrub(message, self.url)}")
            error.transient = transient(exc)
            raise error from None

    def _has_tables(self) -> bool:
        if not self._found:  # once there, they stay: look until then
            from sqlalchemy import inspect

            self._found = inspect(self.engine).has_table(schema.Meta.__tablename__)
        return self._found

    @property
    def ready(self) -> bool:
        """Whether autotune's tables exist (a new, empty database has none)."""
        return self._has_tables()

    def schema_version(self) -> int:
        with self.session() as s:
            return (schema.version(s) if self._has_tables() else None) or 0

    @contextlib.contextmanager
    def ledger(self, study: str, *, lock: bool = False) -> Iterator[Ledger]:
        """One transaction on a study's claims and measurements (with ``lock``, serialised with
        every other locked one on the study), for :mod:`autotune.coordination`."""
        with self.session() as s:
            ledger = Ledger(s, study)
            if lock:
                ledger.lock()
            yield ledger

    # studies and runs
    @resilient
    def study(self, name: str) -> StoredStudy | None:
        if not self._has_tables():
            return None
        with self.session() as s:
            row = s.get(StudyRow, name)
            return None if row is None else _study(row)

    @resilient
    def studies(self) -> list[StoredStudy]:
        if not self._has_tables():
            return []
        with self.session() as s:
            return [_study(r) for r in s.scalars(select(StudyRow).order_by(StudyRow.created_at))]

    @resilient
    def add_study(self, name: str, spec: dict[str, Any], environment: dict[str, Any]) -> None:
        """Create the study, or store the latest spec (a resumed study's new budget, say)."""
        with self.session() as s:
            row = s.get(StudyRow, name)
            if row is None:
                s.add(StudyRow(name=name, spec=spec, environment=environment))
            else:
                row.spec = spec

    @resilient
    def set_environment(self, name: str, environment: dict[str, Any]) -> None:
        with self.session() as s:
            row = s.get(StudyRow, name)
            if row is not None:
                row.environment = environment

    @resilient
    def add_run(self, study: str, environment: dict[str, Any]) -> None:
        with self.session() as s:
            s.add(RunRow(study=study, environment=environment, host=socket.gethostname(),
                         pid=os.getpid()))  # fmt: skip

    @resilient
    def runs(self, study: str) -> list[RunRecord]:
        with self.session() as s:
            rows = s.scalars(select(RunRow).where(RunRow.study == study))
            return [RunRecord(r.environment, r.host, r.pid, r.started_at) for r in rows]

    # measurements
    @resilient
    def measurement(self, study: str, key: str) -> Stored | None:
        with self.session() as s:
            return Ledger(s, study).measurement(key)

    @resilient
    def measurements(self, study: str, after: int = 0) -> list[Stored]:
        """The study's stored measurements in the order stored (``after``: only those stored
        after the one with that id, for a reader that follows a study as it grows)."""
        with self.session() as s:
            query = select(MeasurementRow).where(
                MeasurementRow.study == study, MeasurementRow.id > after
            )
            return [records.stored(r) for r in s.scalars(query.order_by(MeasurementRow.id))]

    @resilient
    def measured_keys(self, study: str) -> set[str]:
        """The keys measured by a trial in the study, not those deduced (no payloads read)."""
        with self.session() as s:
            query = select(MeasurementRow.key).where(
                MeasurementRow.study == study, MeasurementRow.deduced_from.is_(None)
            )
            return set(s.scalars(query))

    @resilient
    def add_measurement(
        self, study: str, key: str, trial_number: int | None, payload: dict[str, Any]
    ) -> None:
        """Store a measurement outside any coordination (tests, imports); workers record
        theirs through :class:`autotune.coordination.Coordinator`."""
        with self.session() as s:
            Ledger(s, study).add_measurement(key, trial_number, payload, None, None)

    @resilient
    def live_workers(self, grace_s: float) -> dict[str, int]:
        """Workers measuring right now (a claim beaten within ``grace_s``), per study, in one
        query."""
        from sqlalchemy import distinct

        from autotune.storage.ledger import clock
        from autotune.storage.schema import ClaimRow

        with self.session() as s:
            query = (
                select(ClaimRow.study, func.count(distinct(ClaimRow.worker)))
                .where(ClaimRow.heartbeat >= clock(s) - grace_s)
                .group_by(ClaimRow.study)
            )
            return {study: int(n) for study, n in s.execute(query).all()}

    @resilient
    def claims(self, study: str) -> list[records.Claim]:
        with self.session() as s:
            return Ledger(s, study).claims()

    # the reference (bytes of its file) and confirmations
    @resilient
    def add_reference(self, study: str, dtype: str, reason: str, data: bytes | None) -> bool:
        """Store the study's reference unless one is stored already; whether this one was."""
        import hashlib

        digest = hashlib.sha256(data).hexdigest() if data else ""
        try:
            with self.session() as s:
                if s.get(ReferenceRow, study) is not None:
                    return False
                s.add(ReferenceRow(study=study, dtype=dtype, reason=reason, sha256=digest,
                                   data=data))  # fmt: skip
                s.flush()
        except IntegrityError:  # a peer's, stored first
            return False
        return True

    @resilient
    def reference(self, study: str) -> tuple[str, str, bytes | None] | None:
        """The study's reference: (dtype, reason, bytes), or None when none is stored yet."""
        with self.session() as s:
            row = s.get(ReferenceRow, study) if self._has(ReferenceRow) else None
            return None if row is None else (row.dtype, row.reason, row.data)

    @resilient
    def add_confirmation(self, study: str, policy: str, key: str, payload: dict[str, Any]) -> None:
        with self.session() as s:
            s.add(ConfirmationRow(study=study, policy=policy, key=key, payload=payload))

    @resilient
    def confirmation(self, study: str, policy: str) -> tuple[str, dict[str, Any]] | None:
        """The latest confirmation of the study's pick under ``policy``: (key, payload)."""
        if not self._has(ConfirmationRow):
            return None
        with self.session() as s:
            query = select(ConfirmationRow).where(
                ConfirmationRow.study == study, ConfirmationRow.policy == policy
            )
            row = s.scalars(query.order_by(ConfirmationRow.id.desc())).first()
            return None if row is None else (row.key, row.payload)

    def _has(self, table: Any) -> bool:
        """Whether a table of a later schema exists (a database opened only to read may
        predate it)."""
        from sqlalchemy import inspect

        return inspect(self.engine).has_table(table.__tablename__)

    # exports
    @resilient
    def add_export(self, study: str, policy: str, fmt: str, key: str, content: str) -> None:
        with self.session() as s:
            s.add(ExportRow(study=study, policy=policy, format=fmt, key=key, content=content))

    @resilient
    def latest_export(self, study: str, fmt: str = "accelerate") -> ExportRecord | None:
        """The study's latest export in format ``fmt``, or None."""
        with self.session() as s:
            query = select(ExportRow).where(ExportRow.study == study, ExportRow.format == fmt)
            r = s.scalars(query.order_by(ExportRow.id.desc()).limit(1)).first()
            return None if r is None else ExportRecord(r.policy, r.format, r.key, r.content,
                                                       r.exported_at)  # fmt: skip

    @resilient
    def stamp(self) -> tuple[int, ...]:
        """A cheap fingerprint of what the storage holds, in one query: it changes whenever a
        study, run, measurement, export or confirmation is added (or a measurement deleted),
        so a reader may keep what it computed from the rest until it does."""
        if not self._has_tables():
            return ()
        tables = (StudyRow, RunRow, MeasurementRow, ExportRow, ConfirmationRow)
        columns = [select(func.count()).select_from(t).scalar_subquery() for t in tables]
        columns += [select(func.max(t.id)).scalar_subquery() for t in tables[1:]]
        with self.session() as s:
            return tuple(v or 0 for v in s.execute(select(*columns)).one())

    @resilient
    def exports(self, study: str) -> list[ExportRecord]:
        with self.session() as s:
            query = select(ExportRow).where(ExportRow.study == study).order_by(ExportRow.id)
            return [ExportRecord(r.policy, r.format, r.key, r.content, r.exported_at)
                    for r in s.scalars(query)]  # fmt: skip


def _study(row: StudyRow) -> StoredStudy:
    return StoredStudy(row.name, row.spec, row.environment, row.created_at)
