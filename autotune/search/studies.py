"""A store's studies with their specs typed: a :class:`StudyRecord`'s ``spec`` is the
:class:`~autotune.search.spec.StudySpec` its stored JSON reads back as
(:meth:`StudySpec.from_dict`, lenient), read on first use: a study whose spec cannot be read
fails where it is read, never a listing of every study.

    record = studies.study(store, "toy-64-inference")  # None where there is none
    record.spec.policy, record.spec.workload.traffic      # typed, with the documented defaults
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from autotune.search.spec import StudySpec
from autotune.storage import StoredStudy

if TYPE_CHECKING:
    from autotune.storage import Store


class StudyRecord(StoredStudy):
    """A stored study (name, spec as stored, environment), its spec read typed."""

    @functools.cached_property
    def spec(self) -> StudySpec:
        """The spec, read once (``ConfigError`` naming the study and the key where a value its
        answer depends on is garbled)."""
        return StudySpec.from_dict(self.spec_json, self.name)

    @classmethod
    def of(cls, stored: StoredStudy) -> StudyRecord:
        return cls(stored.name, stored.spec_json, stored.environment, stored.created_at)


def study(store: Store, name: str) -> StudyRecord | None:
    """Study ``name`` of ``store`` (None where there is none)."""
    found = store.study(name)
    return None if found is None else StudyRecord.of(found)


def studies(store: Store) -> list[StudyRecord]:
    """Every study of ``store``, oldest first."""
    return [StudyRecord.of(s) for s in store.studies()]
