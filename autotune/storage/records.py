"""What the store hands out: plain, detached records of its rows, so that nothing outside
:mod:`autotune.storage` ever holds (or imports) an ORM row.

A study's spec is stored as JSON (``StudySpec.to_dict``) and handed out as it is stored
(:class:`StoredStudy`): the search reads it, typed (:mod:`autotune.search.studies`).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StoredStudy:
    """A study: its name, spec as stored (the JSON, read by ``StudySpec.from_dict`` alone,
    never changed) and environment fingerprint."""

    name: str
    spec_json: Any = field(repr=False)
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
