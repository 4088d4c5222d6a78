"""Opening a search: set-up and resume (:func:`open_search`), submitting a study for workers to
run later (:func:`submit`), and joining one as a worker (:func:`join`).

Everything is validated before anything is written: bad input never leaves a study behind.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
import uuid
from typing import Any

from autotune import usercode
from autotune.choice import objectives
from autotune.coordination import Coordinator, check_environment
from autotune.environment import fingerprint
from autotune.errors import ConfigError
from autotune.search import stops, studies
from autotune.search.deduction import Tactics
from autotune.search.plan import Plan
from autotune.search.sampler import Steered, base_sampler, quiet_optuna
from autotune.search.spec import StudySpec
from autotune.search.state import Search
from autotune.storage import Store, mask, optuna_storage
from autotune.strategy.space import KEYS
from autotune.trial.measurement import Measurement
from autotune.trial.rungs import wanted


def resumable(stored: StudySpec | None, spec: StudySpec, name: str) -> StudySpec:
    """The spec this run stores: the new one, keeping the study's space when the new space is
    within it (the run is narrowed to it); a space that adds values is refused."""
    if stored is None or stored.space == spec.space:
        return spec
    if stored.space.contains(spec.space):
        return dataclasses.replace(spec, space=stored.space)
    wider = {
        n: [v for v in getattr(spec.space, n) if v not in getattr(stored.space, n)] for n in KEYS
    }
    added = "; ".join(f"{n} {', '.join(map(str, v))}" for n, v in wider.items() if v)
    raise ConfigError(
        f"study {name!r} was searched over another space, and this one adds {added}: resume "
        "it with the same space (or a narrower one), or start another study with --study NAME"
    )


def open_optuna(url: str, name: str, spec: StudySpec, seed: int, size: int) -> tuple[Any, Steered]:
    """Create or load the Optuna study beside autotune's tables, with its steered sampler."""
    import optuna

    quiet_optuna()
    steered = Steered(base_sampler(spec.sampler, seed, size), spec.space, seed)
    study = optuna.create_study(
        storage=optuna_storage(url), study_name=name, load_if_exists=True, sampler=steered,
        directions=objectives.directions(spec.objectives),
    )  # fmt: skip
    study.set_metric_names([objectives.METRICS[o] for o in spec.objectives])
    return study, steered


def open_search(
    spec: StudySpec, storage: str | None, *, force: bool = False, name: str | None = None,
    save_spec: bool = True, clean: bool = True, began: float | None = None,
) -> Search:  # fmt: skip
    """Open a study to search: create it, or resume it (a narrower space is fine, a wider one
    refused), or join it as a worker (``save_spec=False``: the stored spec stands). ``clean``:
    fail what an earlier run left RUNNING, if no worker is live (not for workers that a
    search started: it has cleaned, and their siblings' fresh trials are not an earlier run's).
    Every search, lone or a worker, gets its :class:`~autotune.search.plan.Plan` here: its time
    budget runs from ``began`` (``time.time()``; default now, as a worker joins)."""
    began = began or time.time()
    w = spec.workload
    members = spec.space.validate(w.device, w.kind)  # bad input: before any file
    environment = fingerprint(spec.workload.device, spec.workload.dtype)  # as trials run
    name = name or spec.study_name(environment)
    worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    store = Store(storage)
    row = studies.study(store, name)
    stored = None if row is None else row.spec.check()  # every value read, none defaulted
    if row is not None and row.environment:
        check_environment(row.environment, environment, force)
    saved = resumable(stored, spec, name)
    keys = {s.key for s in (members if saved.space == spec.space
                            else saved.space.validate(spec.workload.device))}  # fmt: skip
    # a lone search is reproducible; workers that join a study each sample differently,
    # or they would all propose the same strategy at the same moment
    seed = spec.settings.seed if save_spec else hash((spec.settings.seed, worker))
    study, sampler = open_optuna(store.url, name, saved, seed % 2**31, len(members))
    if save_spec or row is None:
        store.add_study(name, saved.to_dict(), environment)
    if row is not None and not row.environment:  # submitted: the first joiner's
        store.set_environment(name, environment)
    store.add_run(name, environment)
    coord = Coordinator(store, name, worker)
    if clean:
        coord.clean(study)  # what an earlier run left RUNNING, when nobody is working on it now
    store.retry = True  # from here on, a lost connection is waited out, not fatal
    plan = Plan(spec.time_budget_s, began, iters=spec.settings.iters,
                rungs=wanted(spec.rungs, spec.objectives, spec.policy))  # fmt: skip
    search = Search(
        spec, saved.space, name, worker, store, coord, study, sampler, members, keys,
        environment, plan, Tactics(equivalence=spec.equivalence,
                                   model=saved.sampler == "surrogate"),
    )  # fmt: skip
    earlier = [Measurement.from_dict(r.payload) for r in store.measurements(name)
               if r.measured and r.key != "none"]  # fmt: skip
    plan.learn_stored(earlier, stops.stopped_before(search))  # what earlier runs leave it
    return search


def submit(spec: StudySpec, storage: str | Store | None) -> str:
    """Create a study with its whole spec, for workers to join later; return its name.

    Its environment is left open: the first worker to join sets it, and later workers must
    match it. The default name leaves the hardware out, since the submitter may have none.
    """
    store = storage if isinstance(storage, Store) else Store(storage)
    name = spec.study or f"{spec.model.slug()}-{spec.workload.slug()}"
    if store.study(name) is not None:
        raise ConfigError(f"a study named {name!r} exists already in {mask(store.url)}")
    members = spec.space.validate(spec.workload.device, spec.workload.kind)
    open_optuna(store.url, name, spec, spec.settings.seed, len(members))
    store.add_study(name, spec.to_dict(), {})
    return name


def join(
    name: str, storage: str | None, *, device: str | None = None, force: bool = False,
    allow: list[str] | None = None, clean: bool = True,
) -> Search:  # fmt: skip
    """A worker's search on an existing study: everything comes from the storage, and the code
    its spec names runs only if ``allow`` names it (autotune.usercode)."""
    from autotune.workload import Workload

    store = Store(storage, create=False)
    row = studies.study(store, name)
    if row is None:
        raise ConfigError(f"no study named {name!r} in {mask(store.url)}")
    spec = row.spec.check()
    usercode.check_allowed(spec, allow or [], f"study {name!r}")
    if device is not None:
        workload = Workload.create(**{**spec.workload.to_dict(), "device": device})
        spec = dataclasses.replace(spec, workload=workload)
    return open_search(spec, storage, force=force, name=name, save_spec=False, clean=clean)
