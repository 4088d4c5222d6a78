"""Sharing a study: submit one (its whole spec, no hardware yet) for workers to join, and join
one as a worker, with everything read from the storage."""

from __future__ import annotations

import dataclasses

from autotune import trials
from autotune.errors import ConfigError
from autotune.selection import METRICS
from autotune.spec import StudySpec
from autotune.store import Store, mask
from autotune.study import Search


def submit(spec: StudySpec, storage: str | None) -> str:
    """Create a study with its whole spec, for workers to join later; return its name.

    Its environment is left open: the first worker to join sets it, and later workers must
    match it. The default name leaves the hardware out, since the submitter may have none.
    """
    store = Store(storage)
    name = spec.study or f"{spec.model.slug()}-{spec.workload.slug()}"
    if store.study(name) is not None:
        raise ConfigError(f"a study named {name!r} exists already in {mask(store.url)}")
    members = spec.space.validate(spec.workload.device)
    store.add_study(name, spec.to_dict(), {})
    metrics = [METRICS[o] for o in spec.objectives]
    trials.open_study(store.url, name, spec.space, spec.sampler, spec.settings.seed,
                      len(members), len(spec.objectives), metrics)  # fmt: skip
    return name


def join(
    name: str, storage: str | None, *, device: str | None = None, force: bool = False
) -> Search:
    """A worker's search on an existing study: everything comes from the storage."""
    from autotune.workload import Workload

    store = Store(storage, create=False)
    row = store.study(name)
    if row is None:
        raise ConfigError(f"no study named {name!r} in {mask(store.url)}")
    spec = StudySpec.from_dict(row.spec)
    if device is not None:
        workload = Workload.create(**{**spec.workload.to_dict(), "device": device})
        spec = dataclasses.replace(spec, workload=workload)
    return Search(spec, storage, force=force, name=name, save_spec=False)
