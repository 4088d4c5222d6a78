"""The read side of a study: :func:`load_study` reads a stored study once and answers from what
it read, as ``optuna.load_study`` returns a ``Study``. Every front end reads a study through it:
the search's summary, ``autotune show``, the export, the service's views and exports, and the
dashboard.

    study = autotune.load_study("gemma-2b-inference-b1-s32-float32-cpu")
    study.answer().chosen.key      # the pick under the study's policy (or answer("fastest"))
    study.tally()                  # measured, deduced, ok, failed

The export reads through it too (:func:`autotune.ship.export.document`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from autotune.choice.verdict import Answer, answer
from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.search.spec import StudySpec
    from autotune.search.studies import StudyRecord
    from autotune.storage import Store, Stored
    from autotune.trial.measurement import Measurement


@dataclass
class StudyView:
    """A stored study as read once: its record (spec, environment) and its measurements' rows;
    answers under any policy from them (each policy's read once)."""

    store: Store
    record: StudyRecord
    rows: list[Stored]
    _answers: dict[tuple[str, float | None], Answer] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, store: Store, name: str) -> StudyView:
        """Study ``name`` of ``store``; ``ConfigError`` where there is none."""
        from autotune.search.studies import study
        from autotune.storage import mask

        record = study(store, name)
        if record is None:
            raise ConfigError(f"no study named {name!r} in {mask(store.url)}")
        return cls(store, record, store.measurements(record.name))

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def spec(self) -> StudySpec:
        return self.record.spec

    def measurements(self) -> list[Measurement]:
        """Every stored measurement, typed."""
        from autotune.trial.measurement import Measurement

        return [Measurement.from_dict(r.payload) for r in self.rows]

    def confirmation(self, policy: str | None = None) -> tuple[str, dict[str, Any]] | None:
        """The stored confirmation of the pick under ``policy`` (the study's by default)."""
        return self.store.confirmation(self.name, policy or self.spec.policy)

    def answer(self, policy: str | None = None,
               max_memory_mb: float | Literal["spec"] | None = "spec") -> Answer:  # fmt: skip
        """The study's answer under ``policy`` (the study's by default) and memory limit (the
        study's by default; None for none): the pick, the points, the front, the verdict and
        the confirmation that decides it, as every command gives it."""
        policy = policy or self.spec.policy
        limit = self.spec.max_memory_mb if max_memory_mb == "spec" else max_memory_mb
        key = (policy, limit)
        if key not in self._answers:
            self._answers[key] = answer(self.rows, self.name, self.spec.objectives, policy, limit,
                                        self.confirmation(policy))  # fmt: skip
        return self._answers[key]

    def tally(self) -> dict[str, int]:
        """Strategies measured and deduced, and of the measured ones how many ran ``ok``."""
        from autotune.search.overview import counts

        return counts(self.spec, self.rows)

    def front(self, policy: str | None = None) -> list[Any]:
        """The Pareto front the answer under ``policy`` chose from."""
        return self.answer(policy).front


def load_study(name: str, storage: str | None = None) -> StudyView:
    """Study ``name`` of ``storage`` (an SQLAlchemy URL; default ``$AUTOTUNE_STORAGE``, else
    ``studies/autotune.db``), read once; ``ConfigError`` where there is no such study."""
    from autotune.search.spec import check_name
    from autotune.storage import Store

    return StudyView.of(Store(storage, create=False), check_name(name))
