"""The queue that ``autotune queue-worker`` serves: every study in a storage, oldest first, and
which of them a worker on this machine should take next.

A study is open while it has budget left that no live worker holds: fewer strategies measured
or being measured by a live worker (a claim beaten within ``$AUTOTUNE_GRACE_S``, read by
:func:`autotune.variables.grace_s`, 30 s by default) than its budget and its space, or a stored
measurement that no trial has adopted yet. A silent claim counts as free, so
a worker joins the study and its loop reaps the claim: a dead worker's strategy is never lost.
A study fits this machine when its device kind is here and, once a first worker has fixed its
environment, the hardware and torch agree (:func:`autotune.coordination.comparable`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from autotune.coordination import Coordinator, comparable
from autotune.errors import AutotuneError
from autotune.search.spec import StudySpec
from autotune.search.studies import StudyRecord, studies
from autotune.storage import Store


@dataclass(frozen=True)
class Standing:
    """Where a study stands, for the queue: its space's ``size``, its ``budget``, strategies
    ``measured`` (or deduced: settled), those ``held`` by a live worker, and ``unadopted``
    measurements (no trial's yet)."""

    size: int
    budget: int
    settled: int
    measured: int
    held: int
    unadopted: int

    @property
    def open(self) -> bool:
        """Whether a worker that joins now has something to do."""
        if self.unadopted and not self.held:
            return True
        return self.settled < self.size and self.measured + self.held < min(self.budget, self.size)


def space_keys(spec: StudySpec, device: str) -> set[str]:
    """The keys of a spec's space that can run on ``device``."""
    return {s.key for s in spec.space.validate(device)}


def standing(store: Store, name: str, keys: set[str], budget: int) -> Standing:
    """Where a study stands, from the same two small queries a worker's tally makes."""
    t = Coordinator(store, name, "").tally(keys)  # "": no worker of its own
    return Standing(len(keys), budget, len(t.settled), len(t.measured), len(t.live),
                    len(t.unadopted))  # fmt: skip


@dataclass
class Queue:
    """One worker's view of the queue. ``device_for`` maps a study's device to the one this
    worker would measure it on (None: not here, e.g. a CUDA study on a CPU machine);
    ``environment`` gives this machine's fingerprint on a device for a dtype, as a trial of
    the study would run (a float32 study's trials on a GPU at TF32: :func:`autotune.environment.
    fingerprint`); ``allowed`` says whether the code a spec names may run here (a reason when
    not)."""

    store: Store
    device_for: Callable[[str], str | None]
    environment: Callable[[str, str | None], dict[str, Any]]
    allowed: Callable[[StudySpec], str | None]

    def __post_init__(self) -> None:
        self.skipped: dict[str, str] = {}  # studies this worker will not take, and why
        self._keys: dict[tuple[str, str], set[str]] = {}

    def why_not(self, study: StudyRecord) -> str | None:
        """Why this worker cannot take ``study`` (None when it can); ``ConfigError`` where its
        spec cannot be read."""
        study.spec.check()  # the worker would refuse it: so does the queue
        device = self.device(study)
        if device is None:
            return "its device is not on this machine"
        dtype = study.spec.workload.dtype  # as its trials run
        if study.environment and comparable(study.environment) != comparable(
            self.environment(device, dtype)
        ):
            return "its hardware or torch differs from this machine's"
        return self.allowed(study.spec)

    def device(self, study: StudyRecord) -> str | None:
        return self.device_for(study.spec.workload.device)

    def next(self, exclude: Iterable[str] = ()) -> StudyRecord | None:
        """The oldest open study this worker can take (None when there is none)."""
        left_out = set(exclude)
        for study in studies(self.store):
            if study.name in left_out or study.name in self.skipped:
                continue
            try:
                if self.why_not(study) is not None:
                    continue  # another machine's, or code this worker may not run: not an error
                device = self.device(study)
                assert device is not None
                keys = self._space(study, device)
                budget = study.spec.trials
            except AutotuneError as exc:  # a spec this autotune cannot read: say so once
                self.skipped[study.name] = str(exc)
                continue
            if standing(self.store, study.name, keys, budget).open:
                return study
        return None

    def _space(self, study: StudyRecord, device: str) -> set[str]:
        cached = (study.name, repr(study.spec.space))
        if cached not in self._keys:
            self._keys[cached] = space_keys(study.spec, device)
        return self._keys[cached]
