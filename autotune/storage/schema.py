"""The schema of autotune's own tables (prefix ``autotune_``), and its migrations.

Optuna's tables hold the trials; these sit beside them in the same database and hold what Optuna
does not model well: each study's spec and environment, every run's fingerprint, each measured
strategy with its raw samples and phase times, the claims that keep workers apart, and every
export. A database made by an older autotune is brought up to :data:`SCHEMA_VERSION` by adding
the columns each later version added (:data:`MIGRATIONS`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    inspect,
    text,
)
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, declared_attr, mapped_column

from autotune.errors import StorageError

SCHEMA_VERSION = 4
MIGRATIONS = {  # version -> what it added to an existing database (new tables: create_all)
    2: ["ALTER TABLE autotune_claims ADD COLUMN heartbeat FLOAT",  # claims' heartbeat
        "ALTER TABLE autotune_measurements ADD COLUMN worker VARCHAR(256)"],
    3: ["ALTER TABLE autotune_measurements ADD COLUMN deduced_from VARCHAR(256)"],
    4: [],  # autotune_references, autotune_confirmations
}  # fmt: skip


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar = {dict[str, Any]: JSON}


class Meta(Base):
    __tablename__ = "autotune_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class StudyRow(Base):
    __tablename__ = "autotune_studies"
    name: Mapped[str] = mapped_column(String(512), primary_key=True)
    spec: Mapped[dict[str, Any]]
    environment: Mapped[dict[str, Any]]
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=now)


class OfStudy:
    """Columns of a row that belongs to one study."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    study: Mapped[str] = mapped_column(ForeignKey("autotune_studies.name"), index=True)


class RunRow(OfStudy, Base):
    """One process that worked on a study: a search or a worker."""

    __tablename__ = "autotune_runs"
    environment: Mapped[dict[str, Any]]
    host: Mapped[str] = mapped_column(String(256))
    pid: Mapped[int]
    started_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=now)


class OfStrategy(OfStudy):
    """Columns of a row about one canonical strategy of a study: at most one per key."""

    key: Mapped[str] = mapped_column(String(256))
    trial_number: Mapped[int | None]

    @declared_attr.directive
    def __table_args__(cls) -> tuple:  # a constraint of each table's own
        return (UniqueConstraint("study", "key"),)


class MeasurementRow(OfStrategy, Base):
    """A measured canonical strategy: unique per study, so nothing is measured twice. Its
    ``trial_number`` is None until a trial adopts it (the baseline, or a measurement whose
    worker's trial was failed while the worker was away)."""

    __tablename__ = "autotune_measurements"
    status: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]]
    worker: Mapped[str | None] = mapped_column(String(256), default=None)
    # not measured: the key of the measured strategy it follows from (autotune.search.deduction)
    deduced_from: Mapped[str | None] = mapped_column(String(256), default=None)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=now)


class ClaimRow(OfStrategy, Base):
    """A strategy taken by one worker: unique per study, so no two workers measure it. While
    its measurement is in flight, ``heartbeat`` holds the database clock's last beat of its
    worker (seconds since the epoch); None once the trial is told."""

    __tablename__ = "autotune_claims"
    worker: Mapped[str] = mapped_column(String(256))
    claimed_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=now)
    heartbeat: Mapped[float | None] = mapped_column(Float, default=None)


class ExportRow(OfStudy, Base):
    """Every configuration exported from a study, with its policy and format."""

    __tablename__ = "autotune_exports"
    policy: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(32))
    key: Mapped[str] = mapped_column(String(256))
    content: Mapped[str] = mapped_column(Text)
    exported_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=now)


class ReferenceRow(Base):
    """A study's higher-precision reference outputs (autotune.trial.precise), as the file
    a trial reads (``data``: ``torch.save`` bytes, loaded with ``weights_only``); no data and a
    ``reason`` when there is none."""

    __tablename__ = "autotune_references"
    study: Mapped[str] = mapped_column(ForeignKey("autotune_studies.name"), primary_key=True)
    dtype: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    sha256: Mapped[str] = mapped_column(String(64), default="")
    data: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=now)


class ConfirmationRow(OfStudy, Base):
    """A pick re-measured against its nearest rivals before export (autotune.choice.confirm)."""

    __tablename__ = "autotune_confirmations"
    policy: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(256))  # the pick after confirmation
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=now)


def version(s: Session) -> int | None:
    """The schema version the database records (None: no autotune tables yet)."""
    row = s.get(Meta, "schema_version")
    return int(row.value) if row is not None else None


def stamp(s: Session) -> None:
    """Record the current version in a database that has none."""
    s.add(Meta(key="schema_version", value=str(SCHEMA_VERSION)))


def upgrade(s: Session) -> bool:
    """Bring an older database up to :data:`SCHEMA_VERSION`; whether anything changed."""
    row = s.get(Meta, "schema_version")
    if row is None or int(row.value) >= SCHEMA_VERSION:
        return False
    for v in range(int(row.value) + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS.get(v, []):
            s.execute(text(statement))
    row.value = str(SCHEMA_VERSION)
    return True


def prepare(engine: Engine, session: Callable[[], AbstractContextManager[Session]],
            create: bool, shown: str) -> None:  # fmt: skip
    """Create missing tables (when ``create``) and migrate an older autotune's database; a
    database without autotune's tables, opened only to read, stays as it is. Processes that
    open one new database at once race to create and stamp it, one table at a time: each loss
    means a peer made one, so the loser looks again, at most once per table."""
    tries = len(Base.metadata.tables) + 2
    for attempt in range(tries):
        try:
            return _prepare_once(engine, session, create, shown)
        except (IntegrityError, OperationalError, ProgrammingError) as exc:
            lost = isinstance(exc, IntegrityError) or "already exists" in str(exc.orig or exc)
            if attempt == tries - 1 or not lost:
                raise


def _prepare_once(engine: Engine, session: Callable[[], AbstractContextManager[Session]],
                  create: bool, shown: str) -> None:  # fmt: skip
    if create:
        Base.metadata.create_all(engine)  # the tables that are missing
    with session() as s:
        found = version(s) if inspect(engine).has_table(Meta.__tablename__) else None
        if found is None:
            if create:
                stamp(s)
            return
        if found > SCHEMA_VERSION:
            raise StorageError(
                f"storage {shown} has autotune schema {found}, newer than this "
                f"autotune's {SCHEMA_VERSION}: upgrade autotune"
            )
        upgrade(s)
