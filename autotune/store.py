"""Storage: the study database's URL (masked whenever shown) and autotune's own tables.

Optuna's own tables hold the trials, so ``optuna`` and optuna-dashboard read a study as it is.
autotune's tables (prefix ``autotune_``) sit beside them in the same database and hold what
Optuna does not model well: the study's spec and environment, every run's fingerprint, each
measured strategy with its raw samples and phase times, and every export.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    select,
    text,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, declared_attr, mapped_column

from autotune.errors import StorageError

SCHEMA_VERSION = 3  # 2: claims' heartbeat, measurements' worker; 3: measurements' deduced_from
DEFAULT_URL = "sqlite:///studies/autotune.db"


RETRY_S = float(os.environ.get("AUTOTUNE_DB_RETRY_S", "300"))
T = TypeVar("T")


def transient(exc: BaseException) -> bool:
    """A lost connection (a restart, a network drop), as opposed to a wrong query or URL."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (OperationalError, InterfaceError)) or getattr(
            seen, "connection_invalidated", False
        ):
            return True
        if isinstance(seen, StorageError) and seen.transient:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def retrying(fn: Callable[[], T], what: str, url: str) -> T:
    """Run ``fn``, retrying with back-off while the database cannot be reached (RETRY_S)."""
    delay, deadline = 0.5, time.monotonic() + RETRY_S
    while True:
        try:
            return fn()
        except Exception as exc:
            if not transient(exc) or time.monotonic() > deadline:
                raise
            print(f"autotune: storage {mask(url)} unreachable during {what}; retrying in "
                  f"{delay:g} s", file=sys.stderr, flush=True)  # fmt: skip
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


def resilient(method: Callable[..., T]) -> Callable[..., T]:
    """A Store method that, once the store is running, outlasts lost connections."""

    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> T:
        if not self.retry:
            return method(self, *args, **kwargs)
        return retrying(lambda: method(self, *args, **kwargs), method.__name__, self.url)

    return wrapper


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def resolve_url(url: str | None) -> str:
    """``--storage``, else ``$AUTOTUNE_STORAGE``, else a SQLite file under ``studies/``."""
    url = url or os.environ.get("AUTOTUNE_STORAGE") or DEFAULT_URL
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StorageError(f"malformed storage URL {mask(url)!r}: use a SQLAlchemy URL") from None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:"):
            raise StorageError("a SQLite storage needs a file: sqlite:///path/to/file.db")
        folder = Path(database).parent
        if url != DEFAULT_URL and not folder.is_dir():
            raise StorageError(f"storage {url}: folder {folder} does not exist")
    return url


def mask(url: str) -> str:
    """The URL with its password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url.split("@")[-1] if "@" in url else url


def scrub(text: str, url: str) -> str:
    """Remove the URL's password from any text (error messages, logs)."""
    try:
        password = make_url(url).password
    except ArgumentError:
        return text
    return text.replace(str(password), "***") if password else text


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
    # not measured: the key of the measured strategy it follows from (autotune.deduction)
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


class Store:
    """autotune's tables in one database. Database errors become ``StorageError``."""

    def __init__(self, url: str | None = None, *, create: bool = True) -> None:
        self.retry = False  # set once running: then lost connections are waited out
        self.url = resolve_url(url)
        parsed = make_url(self.url)
        sqlite = parsed.get_backend_name() == "sqlite"
        if not create and sqlite and not Path(parsed.database or "").is_file():
            raise StorageError(f"no study database at {parsed.database}")
        if create and self.url == DEFAULT_URL:
            Path(parsed.database or "").parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = _engine(self.url)
        except ImportError as exc:
            raise StorageError(
                f"storage {mask(self.url)}: its database driver is not installed ({exc.name})"
            ) from None
        with self.session() as s:  # reach the server now: fail early, with one clear line
            s.connection()
        if create:
            self.create_schema()
        else:
            self.upgrade()

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
            message = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise StorageError(f"storage {mask(self.url)}: {scrub(message, self.url)}") from None

    def create_schema(self) -> None:
        """Create the tables on first use and record the schema version."""
        Base.metadata.create_all(self.engine)
        with self.session() as s:
            row = s.get(Meta, "schema_version")
            if row is None:
                s.add(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
            elif int(row.value) > SCHEMA_VERSION:
                raise StorageError(
                    f"storage {mask(self.url)} has autotune schema {row.value}, newer than "
                    f"this autotune's {SCHEMA_VERSION}: upgrade autotune"
                )
        self.upgrade()

    def upgrade(self) -> None:
        """Add the columns that later schema versions added to an existing database's tables."""
        added = {
            2: ["ALTER TABLE autotune_claims ADD COLUMN heartbeat FLOAT",
                "ALTER TABLE autotune_measurements ADD COLUMN worker VARCHAR(256)"],
            3: ["ALTER TABLE autotune_measurements ADD COLUMN deduced_from VARCHAR(256)"],
        }  # fmt: skip
        with self.session() as s:
            row = s.get(Meta, "schema_version")
            if row is None or int(row.value) >= SCHEMA_VERSION:
                return
            for version in range(int(row.value) + 1, SCHEMA_VERSION + 1):
                for statement in added.get(version, []):
                    s.execute(text(statement))
            row.value = str(SCHEMA_VERSION)

    def schema_version(self) -> int:
        with self.session() as s:
            row = s.get(Meta, "schema_version")
            return int(row.value) if row else 0

    # studies and runs
    @resilient
    def study(self, name: str) -> StudyRow | None:
        with self.session() as s:
            return s.get(StudyRow, name)

    @resilient
    def studies(self) -> list[StudyRow]:
        with self.session() as s:
            return list(s.scalars(select(StudyRow).order_by(StudyRow.created_at)))

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
        import socket

        with self.session() as s:
            s.add(
                RunRow(study=study, environment=environment, host=socket.gethostname(),
                       pid=os.getpid())
            )  # fmt: skip

    @resilient
    def runs(self, study: str) -> list[RunRow]:
        with self.session() as s:
            return list(s.scalars(select(RunRow).where(RunRow.study == study)))

    # measurements
    @resilient
    def measurement(self, study: str, key: str) -> MeasurementRow | None:
        with self.session() as s:
            return s.scalars(
                select(MeasurementRow).where(
                    MeasurementRow.study == study, MeasurementRow.key == key
                )
            ).first()

    @resilient
    def measurements(self, study: str) -> list[MeasurementRow]:
        with self.session() as s:
            query = select(MeasurementRow).where(MeasurementRow.study == study)
            return list(s.scalars(query.order_by(MeasurementRow.id)))

    @resilient
    def measured_keys(self, study: str) -> set[str]:
        """The keys measured in a study, not those deduced (cheap: no payloads)."""
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
            s.add(MeasurementRow(study=study, key=key, trial_number=trial_number,
                                 status=payload["status"], payload=payload))  # fmt: skip

    @resilient
    def claims(self, study: str) -> list[ClaimRow]:
        with self.session() as s:
            return list(s.scalars(select(ClaimRow).where(ClaimRow.study == study)))

    # exports
    @resilient
    def add_export(self, study: str, policy: str, fmt: str, key: str, content: str) -> None:
        with self.session() as s:
            s.add(ExportRow(study=study, policy=policy, format=fmt, key=key, content=content))

    @resilient
    def exports(self, study: str) -> list[ExportRow]:
        with self.session() as s:
            query = select(ExportRow).where(ExportRow.study == study).order_by(ExportRow.id)
            return list(s.scalars(query))


def _engine(url: str) -> Engine:
    if make_url(url).get_backend_name() != "sqlite":
        return create_engine(url)  # no pings: a lost connection fails and is retried
    engine = create_engine(url, connect_args={"timeout": 60})

    @event.listens_for(engine, "connect")
    def _wal(dbapi_connection: Any, _: Any) -> None:  # readers never block the writer
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        dbapi_connection.execute("PRAGMA busy_timeout=60000")

    return engine


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)
