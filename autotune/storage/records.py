"""What the store hands out: plain, detached records of its rows, so that nothing outside
:mod:`autotune.storage` ever holds (or imports) an ORM row.

A study's spec is stored as JSON (``StudySpec.to_dict``) and handed out typed, as a
:class:`StoredSpec`: the one place a stored spec is read, with the documented defaults for the
keys an older study lacks, and a ``ConfigError`` naming the study and the key where a stored
value is garbled (never an ``AttributeError`` deep inside a reader). ``StoredSpec.to_dict``
gives the stored JSON back unchanged, for a resumed search and an export.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
from dataclasses import dataclass
from typing import Any, TypeVar

from autotune.errors import AutotuneError, ConfigError
from autotune.fields import Reader, positive, text, texts, whole
from autotune.workload import Workload, default_objectives

T = TypeVar("T")
DEFAULT_POLICY = "knee"  # a study stored before it kept its policy
WORKLOAD_KEYS = tuple(f.name for f in dataclasses.fields(Workload))


@dataclass(frozen=True)
class StoredSpec:
    """A study's spec as stored, read-only and typed. Each value is read on first use (a study
    whose stored ``trials`` is garbled still exports), with Workload's and the objectives'
    documented defaults where an older study lacks a key; unknown keys (another autotune
    version's) are left alone. ``raw`` is the stored JSON; never change it (:meth:`to_dict`
    gives a copy)."""

    raw: Any
    study: str = ""  # named in errors

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON, unchanged (a copy)."""
        return copy.deepcopy(self._tables())

    def check(self) -> StoredSpec:
        """Read every value now: ``ConfigError`` where one is garbled."""
        for name in ("model_name", "layers", "workload", "objectives", "policy", "trials",
                     "max_memory_mb", "granularities", "backends"):  # fmt: skip
            getattr(self, name)
        return self

    @property
    def empty(self) -> bool:
        """Whether nothing is stored (a study made without a spec)."""
        return not self.raw

    # as stored, for what is shown or exported whole
    @property
    def model_table(self) -> dict[str, Any] | None:
        """The ``model`` table as stored (None where it has none)."""
        return self._table("model")

    @property
    def workload_table(self) -> dict[str, Any] | None:
        """The ``workload`` table as stored (None where it has none)."""
        return self._table("workload")

    @property
    def settings_table(self) -> dict[str, Any] | None:
        """The ``settings`` table as stored (None where it has none)."""
        return self._table("settings")

    @property
    def space_table(self) -> dict[str, Any] | None:
        """The ``space`` table as stored (None where it has none)."""
        return self._table("space")

    # typed
    @functools.cached_property
    def model_name(self) -> str | None:
        return self._value(self.model_table or {}, "model", "name", text(), None)

    @functools.cached_property
    def layers(self) -> int | None:
        """The model's layers (None: the whole model)."""
        return self._value(self.model_table or {}, "model", "layers", whole(1), None)

    @functools.cached_property
    def workload(self) -> Workload:
        """The workload, checked as a new one is (Workload's defaults for missing keys)."""
        table = self.workload_table or {}
        if not isinstance(table.get("traffic", []), list):  # a stored traffic is its requests,
            raise self._bad("workload", "traffic", table["traffic"], "a list of requests")
        for key in ("batch_size", "seq_len"):  # and its shape one shape, never a spread to draw
            self._value(table, "workload", key, whole(1), None)
        try:
            return Workload(**{k: v for k, v in table.items() if k in WORKLOAD_KEYS})
        except (AutotuneError, TypeError, ValueError) as exc:
            raise self._error(f"workload: {exc}") from None

    @property
    def kind(self) -> str:
        return self.workload.kind

    @property
    def device(self) -> str:
        return self.workload.device

    @property
    def traffic(self) -> tuple[tuple[int, int], ...]:
        return self.workload.traffic

    @functools.cached_property
    def objectives(self) -> tuple[str, ...]:
        """The objectives, or the workload kind's by default."""
        found = self._value(self._tables(), "", "objectives", texts, ())
        return found or default_objectives(self.kind)

    @functools.cached_property
    def policy(self) -> str:
        """The policy (``knee`` for a study stored before it kept one)."""
        return self._value(self._tables(), "", "policy", text(), None) or DEFAULT_POLICY

    @functools.cached_property
    def trials(self) -> int | None:
        """The budget of strategies to measure (None where none is stored)."""
        return self._value(self._tables(), "", "trials", whole(1), None)

    @functools.cached_property
    def max_memory_mb(self) -> float | None:
        return self._value(self._tables(), "", "max_memory_mb", positive, None)

    @functools.cached_property
    def granularities(self) -> tuple[str, ...] | None:
        """The space's granularities (None where no space is stored)."""
        space = self.space_table
        return None if space is None else self._value(space, "space", "granularity", texts, ())

    @functools.cached_property
    def backends(self) -> tuple[str, ...]:
        """The space's backends (import paths among them: code a worker must be allowed)."""
        return self._value(self.space_table or {}, "space", "backend", texts, ())

    # reading
    def _tables(self) -> dict[str, Any]:
        if not isinstance(self.raw, dict):
            raise self._error(f"it is {type(self.raw).__name__}, not a table of settings")
        return self.raw

    def _table(self, name: str) -> dict[str, Any] | None:
        table = self._tables().get(name)
        if table is not None and not isinstance(table, dict):
            raise self._bad(name, "", table, "a table")
        return table

    def _value(self, table: dict[str, Any], where: str, key: str, read: Reader,
               default: T) -> T:  # fmt: skip
        value = table.get(key)
        if value is None:
            return default
        try:
            return read(value, f"{where}.{key}" if where else key)
        except ConfigError as exc:
            raise self._error(str(exc)) from None

    def _bad(self, table: str, key: str, value: Any, expected: str) -> ConfigError:
        where = f"{table}.{key}" if key else table
        return self._error(f"{where} = {value!r}: expected {expected}")

    def _error(self, what: str) -> ConfigError:
        study = f"study {self.study!r}" if self.study else "a study"
        return ConfigError(f"{study}: its stored spec cannot be read: {what} (stored by another "
                           "autotune version, or changed by hand?)")  # fmt: skip


@dataclass(frozen=True)
class StudyRecord:
    """A study: its name, spec (typed: :class:`StoredSpec`) and environment fingerprint."""

    name: str
    spec: StoredSpec
    environment: dict[str, Any]
    created_at: datetime.datetime | None


@dataclass(frozen=True)
class Stored:
    """A stored measurement of one strategy: ``payload`` is ``Measurement.to_dict``;
    ``trial_number`` None until a trial adopts it; ``deduced_from`` the key of the measured
    strategy it follows from, when it was not measured itself."""

    id: int
    key: str
    trial_number: int | None
    status: str
    payload: dict[str, Any]
    worker: str | None
    deduced_from: str | None
    created_at: datetime.datetime | None

    @property
    def measured(self) -> bool:
        """Measured by a trial (not deduced from another's)."""
        return self.deduced_from is None


@dataclass(frozen=True)
class Claim:
    """A strategy taken by a worker; ``heartbeat`` (database clock, epoch seconds) while its
    measurement is in flight, None once the trial is told."""

    id: int
    key: str
    trial_number: int | None
    worker: str
    heartbeat: float | None


@dataclass(frozen=True)
class RunRecord:
    """One process that worked on a study."""

    environment: dict[str, Any]
    host: str
    pid: int
    started_at: datetime.datetime | None


@dataclass(frozen=True)
class ExportRecord:
    """One export of a study's choice."""

    policy: str
    format: str
    key: str
    content: str
    exported_at: datetime.datetime | None


def stored(row: Any) -> Stored:
    return Stored(row.id, row.key, row.trial_number, row.status, row.payload, row.worker,
                  row.deduced_from, row.created_at)  # fmt: skip


def claim(row: Any) -> Claim:
    return Claim(row.id, row.key, row.trial_number, row.worker, row.heartbeat)
