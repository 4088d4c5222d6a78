"""Optuna's trials in the study database: its RDB storage, written in few transactions.

Optuna's ``RDBStorage`` writes each parameter and attribute of a trial in a transaction of its
own and reads whole trials back: about 100 round trips for one trial of a search on
PostgreSQL, most of a worker's database time. A running trial belongs to one process, so
``TrialStorage`` holds the trials this process runs in memory. A trial is created with its
first heartbeat; its writes wait in memory and reach the database in one transaction with its
end, or earlier with a heartbeat (``Heartbeat`` writes its parameters as a measurement starts).
The tables are Optuna's own, so ``optuna`` and optuna-dashboard read every study as always.
It relies on the internals of Optuna's storage, hence the pin to Optuna 5.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import threading
import warnings
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import (
    Float,
    String,
    Text,
    cast,
    delete,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from sqlalchemy.orm import Session

# A running trial's heartbeat; a trial silent for GRACE_S is stale, its worker presumed dead.
HEARTBEAT_S = int(os.environ.get("AUTOTUNE_HEARTBEAT_S", "5"))
GRACE_S = int(os.environ.get("AUTOTUNE_GRACE_S", "30"))
StaleCallback = Callable[[optuna.Study, FrozenTrial], None]


def quiet_optuna() -> None:
    """autotune shows its own progress: Optuna's per-trial log lines and warnings are noise."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # autotune records heartbeats itself around each ask/tell trial (see Heartbeat)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


@dataclass
class _Pending:
    """Writes to one running trial that the database has not seen yet."""

    params: dict[str, tuple[float, str]] = field(default_factory=dict)
    user_attrs: dict[str, Any] = field(default_factory=dict)
    system_attrs: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.params or self.user_attrs or self.system_attrs)


class TrialStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage that holds this process's running trials in memory: a trial is
    created with its heartbeat, and what it is told waits in memory until its end (or a
    heartbeat) writes it all in one transaction."""

    def __init__(self, url: str, on_stale: StaleCallback | None = None) -> None:
        quiet_optuna()
        sqlite = url.startswith("sqlite")
        super().__init__(
            url, engine_kwargs={"connect_args": {"timeout": 60}} if sqlite else {},
            heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S,
            heartbeat_stale_trial_callback=on_stale,
        )  # fmt: skip
        self._init_held()

    def _init_held(self) -> None:
        self._open: dict[int, FrozenTrial] = {}  # running here, as this process knows them
        self._ended: dict[int, FrozenTrial] = {}  # ended here: finished trials never change
        self._study_of: dict[int, int] = {}
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.RLock()  # the heartbeat thread writes too
        self._read: dict[int, list[FrozenTrial]] | None = None  # see one_read

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        for name in ("_open", "_ended", "_study_of", "_pending", "_lock", "_read"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        self._init_held()

    # trials that start running here are held in memory
    def _create_new_trial(
        self, study_id: int, template_trial: FrozenTrial | None = None
    ) -> FrozenTrial:
        """A new running trial, born with its heartbeat: a worker that dies at any point
        after this leaves a trial that goes stale (enqueued trials wait: Optuna's way)."""
        if template_trial is not None:
            return super()._create_new_trial(study_id, template_trial)
        trials, started = models.TrialModel.__table__, datetime.datetime.now()
        with _create_scoped_session(self.scoped_session) as session:
            # creation is serialised, so the count is the new trial's number: by the study's row
            # lock on a server, by the write lock that the insert takes on SQLite
            if _dialect(session) != "sqlite":
                models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
            count = select(func.count()).where(trials.c.study_id == study_id).scalar_subquery()
            trial_id, number = session.execute(
                insert(trials).values(number=count, study_id=study_id, state=TrialState.RUNNING,
                                      datetime_start=_utc(started))
                .returning(trials.c.trial_id, trials.c.number)
            ).one()  # fmt: skip
            _heartbeat(session, trial_id)
        trial = FrozenTrial(
            number=number, state=TrialState.RUNNING, value=None, values=None,
            datetime_start=started, datetime_complete=None, params={}, distributions={},
            user_attrs={}, system_attrs={}, intermediate_values={}, trial_id=trial_id,
        )  # fmt: skip
        with self._lock:
            self._open[trial._trial_id] = copy.deepcopy(trial)
            self._study_of[trial._trial_id] = study_id
            self._pending[trial._trial_id] = _Pending()
        return trial

    def get_trial(self, trial_id: int) -> FrozenTrial:
        with self._lock:
            held = self._open.get(trial_id) or self._ended.get(trial_id)
            if held is not None:
                return copy.deepcopy(held)
        return super().get_trial(trial_id)

    @contextlib.contextmanager
    def one_read(self) -> Iterator[None]:
        """Within it (one ``ask``), the study's trials come from the database once: Optuna
        and its sampler ask for them up to four times."""
        self._read = {}
        try:
            yield
        finally:
            self._read = None

    def _get_trials(
        self, study_id: int, states: Container[TrialState] | None,
        included_trial_ids: set[int], trial_id_greater_than: int,
    ) -> list[FrozenTrial]:  # fmt: skip
        """Optuna's read of the trials that are new, or were running, with the trials held
        here taken from memory instead."""

        def wanted(t: FrozenTrial) -> bool:
            new = t._trial_id > trial_id_greater_than or t._trial_id in included_trial_ids
            return new and (states is None or t.state in states)

        with self._lock:
            held = self._ended | self._open
            mine = {i for i in held if self._study_of[i] == study_id}
            found = [copy.deepcopy(held[i]) for i in mine if wanted(held[i])]
        stored = self._read.get(study_id) if self._read is not None else None
        if stored is None:
            stored = self._select(study_id, included_trial_ids, trial_id_greater_than, mine)
            if self._read is not None:
                self._read[study_id] = stored
        found += [t for t in stored if t._trial_id not in mine and wanted(t)]
        return sorted(found, key=lambda t: t._trial_id)

    def _select(
        self, study_id: int, ids: set[int], after: int, mine: Iterable[int]
    ) -> list[FrozenTrial]:
        """The trials, with everything they hold in one more query (Optuna's loader takes
        five: one per table)."""
        trial = models.TrialModel
        with _create_scoped_session(self.scoped_session) as session:
            query = session.query(trial).filter(
                trial.study_id == study_id, trial.trial_id.notin_(list(mine))
            )
            if after > -1:
                query = query.filter(or_(trial.trial_id > after, trial.trial_id.in_(ids)))
            rows = query.order_by(trial.trial_id).all()
            held: dict[int, list[Any]] = {row.trial_id: [] for row in rows}
            if held:
                for part in session.execute(_contents(list(held))):
                    held[part.trial_id].append(part)
            return [_frozen(row, held[row.trial_id]) for row in rows]

    def get_trial_user_attrs(self, trial_id: int) -> dict[str, Any]:
        return self.get_trial(trial_id).user_attrs

    def get_trial_system_attrs(self, trial_id: int) -> dict[str, Any]:
        return self.get_trial(trial_id).system_attrs

    def _set_trial_param(
        self, trial_id: int, param_name: str, param_value_internal: float,
        distribution: BaseDistribution, previous_distribution: BaseDistribution | None,
    ) -> None:  # fmt: skip
        with self._lock:
            trial = self._open.get(trial_id)
            if trial is not None:
                if previous_distribution is not None:
                    optuna.distributions.check_distribution_compatibility(
                        previous_distribution, distribution
                    )
                trial.params[param_name] = distribution.to_external_repr(param_value_internal)
                trial.distributions[param_name] = distribution
                as_json = optuna.distributions.distribution_to_json(distribution)
                self._pending[trial_id].params[param_name] = (param_value_internal, as_json)
                return
        super()._set_trial_param(
            trial_id, param_name, param_value_internal, distribution, previous_distribution
        )

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        if not self._hold(trial_id, "user_attrs", key, value):
            super().set_trial_user_attr(trial_id, key, value)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        if not self._hold(trial_id, "system_attrs", key, value):
            super().set_trial_system_attr(trial_id, key, value)

    def _hold(self, trial_id: int, attrs: str, key: str, value: Any) -> bool:
        """Keep an attribute of a trial held here, to be written later; False if not held."""
        with self._lock:
            if trial_id not in self._open:
                return False
            getattr(self._open[trial_id], attrs)[key] = value
            getattr(self._pending[trial_id], attrs)[key] = value
            return True

    def set_trial_intermediate_value(self, trial_id: int, step: int, value: float) -> None:
        with self._lock:  # rare here: write what waits, then Optuna's way
            if trial_id in self._open:
                self.record_heartbeat(trial_id)
            super().set_trial_intermediate_value(trial_id, step, value)
            if trial_id in self._open:
                self._open[trial_id].intermediate_values[step] = value

    def record_heartbeat(self, trial_id: int) -> None:
        """The trial's heartbeat, with whatever of it waits to be written, in one transaction."""
        with self._lock:
            pending = self._pending.get(trial_id)
            with _create_scoped_session(self.scoped_session) as session:
                if pending:
                    _update_running(session, trial_id, TrialState.RUNNING, None)  # lock it
                    _write(session, trial_id, pending)
                _heartbeat(session, trial_id)
            if pending:
                self._pending[trial_id] = _Pending()

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        """Optuna's, plus this trial's waiting writes in the same transaction."""
        with self._lock:
            if trial_id not in self._open and state == TrialState.RUNNING:
                return self._start(trial_id)
            if trial_id not in self._open:  # not held here
                return super().set_trial_state_values(trial_id, state, values)
            ended = datetime.datetime.now() if state.is_finished() else None  # as Optuna's
            try:
                with _create_scoped_session(self.scoped_session) as session:
                    _update_running(session, trial_id, state, ended)
                    _write(session, trial_id, self._pending[trial_id])
                    rows = []
                    for objective, value in enumerate(values or ()):
                        stored, kind = models.TrialValueModel.value_to_stored_repr(value)
                        rows.append({"trial_id": trial_id, "objective": objective,
                                     "value": stored, "value_type": kind})  # fmt: skip
                    if rows:
                        session.execute(insert(models.TrialValueModel), rows)
            except optuna.exceptions.UpdateFinishedTrialError:
                self._forget(trial_id)  # another worker failed it as stale: that end stands
                raise
            held = self._open[trial_id]
            held.state, held.values = state, list(values) if values is not None else None
            held.datetime_complete = ended
            self._pending[trial_id] = _Pending()
            if state.is_finished():  # it never changes again: keep it for Study.tell's read
                self._forget(trial_id)
                self._ended[trial_id] = held
            return True

    def _start(self, trial_id: int) -> bool:
        """Run an enqueued trial here (Optuna pops it): False if another process took it
        first. Like a new trial, it starts beating and is held in memory."""
        trial, started = models.TrialModel, _utc(datetime.datetime.now())
        with _create_scoped_session(self.scoped_session) as session:
            done = session.execute(
                update(trial)
                .where(trial.trial_id == trial_id, trial.state == TrialState.WAITING)
                .values({trial.state: TrialState.RUNNING, trial._datetime_start_utc: started})
            )  # fmt: skip
            if done.rowcount != 1:
                return False
            _heartbeat(session, trial_id)
            row = models.TrialModel.find_or_raise_by_id(trial_id, session)
            frozen = _frozen(row, list(session.execute(_contents([trial_id]))))
            study_id = row.study_id
        with self._lock:
            self._open[trial_id], self._study_of[trial_id] = frozen, study_id
            self._pending[trial_id] = _Pending()
        return True

    def _forget(self, trial_id: int) -> None:
        with self._lock:
            self._open.pop(trial_id, None)
            self._pending.pop(trial_id, None)


def _update_running(
    session: Session, trial_id: int, state: TrialState, ended: datetime.datetime | None
) -> None:
    """Set a running trial's state: its row is locked until the commit. Raises Optuna's
    ``UpdateFinishedTrialError`` if it is not running (a worker failed it as stale). A write
    first, so that SQLite takes its write lock here and never has to upgrade a read."""
    trial = models.TrialModel
    done = session.execute(
        update(trial)
        .where(trial.trial_id == trial_id, trial.state == TrialState.RUNNING)
        .values({trial.state: state, trial._datetime_complete_utc: _utc(ended)})
    )  # fmt: skip
    if done.rowcount != 1:
        raise optuna.exceptions.UpdateFinishedTrialError(f"trial {trial_id} has ended already")


def _write(session: Session, trial_id: int, pending: _Pending) -> None:
    """A trial's waiting writes: one statement per table, replacing what a retry wrote."""
    params = [
        {"trial_id": trial_id, "param_name": name, "param_value": value, "distribution_json": dist}
        for name, (value, dist) in pending.params.items()
    ]
    _upsert(session, models.TrialParamModel, ["param_name"], params)
    for model, attrs in (
        (models.TrialUserAttributeModel, pending.user_attrs),
        (models.TrialSystemAttributeModel, pending.system_attrs),
    ):
        rows = [
            {"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()
        ]
        _upsert(session, model, ["key"], rows)


UPSERT = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def _dialect(session: Session) -> str:
    return session.get_bind().dialect.name


def _upsert(session: Session, model: Any, keys: list[str], rows: list[dict[str, Any]]) -> None:
    """Insert rows unique on (trial_id, *keys), replacing those already there: one statement
    on PostgreSQL and SQLite, a delete and an insert elsewhere."""
    if not rows:
        return
    unique = [model.trial_id, *(getattr(model, k) for k in keys)]
    upsert = UPSERT.get(_dialect(session))
    if upsert is None:
        for row in rows:
            session.execute(delete(model).where(*(c == row[c.key] for c in unique)))
        session.execute(insert(model), rows)
        return
    statement = upsert(model).values(rows)
    replace = {k: statement.excluded[k] for k in rows[0] if k not in {c.key for c in unique}}
    session.execute(statement.on_conflict_do_update(index_elements=unique, set_=replace))


def _contents(trial_ids: list[int]) -> Any:
    """One query for what the trials hold: parameters, values, attributes, intermediate
    values, as rows of (trial_id, kind, key, number, text, id)."""
    m = models

    def part(model: Any, kind: str, key: Any, number: Any, text: Any, row_id: Any) -> Any:
        return select(
            model.trial_id, literal(kind, String).label("kind"), cast(key, String).label("key"),
            cast(number, Float).label("number"), cast(text, Text).label("text"),
            row_id.label("id"),
        ).where(model.trial_id.in_(trial_ids))  # fmt: skip

    p, v, u = m.TrialParamModel, m.TrialValueModel, m.TrialUserAttributeModel
    s, i = m.TrialSystemAttributeModel, m.TrialIntermediateValueModel
    return union_all(
        part(p, "param", p.param_name, p.param_value, p.distribution_json, p.param_id),
        part(v, "value", v.objective, v.value, v.value_type, v.trial_value_id),
        part(u, "user", u.key, null(), u.value_json, u.trial_user_attribute_id),
        part(s, "system", s.key, null(), s.value_json, s.trial_system_attribute_id),
        part(i, "step", i.step, i.intermediate_value, i.intermediate_value_type,
             i.trial_intermediate_value_id),
    ).order_by("id")  # fmt: skip


def _frozen(row: models.TrialModel, parts: list[Any]) -> FrozenTrial:
    """A trial as Optuna's ``_build_frozen_trial_from_trial_model`` builds it."""
    m, of = models, optuna.distributions.json_to_distribution
    kinds: dict[str, list[Any]] = {"param": [], "value": [], "user": [], "system": [], "step": []}
    for part in parts:
        kinds[part.kind].append(part)
    values = [0.0] * len(kinds["value"])
    for v in kinds["value"]:
        kind = m.TrialValueModel.TrialValueType[v.text]
        values[int(v.key)] = m.TrialValueModel.stored_repr_to_value(v.number, kind)
    step_value = m.TrialIntermediateValueModel.stored_repr_to_intermediate_value
    step_kind = m.TrialIntermediateValueModel.TrialIntermediateValueType
    return FrozenTrial(
        number=row.number, state=row.state, value=None, values=values or None,
        datetime_start=row.datetime_start, datetime_complete=row.datetime_complete,
        params={p.key: of(p.text).to_external_repr(p.number) for p in kinds["param"]},
        distributions={p.key: of(p.text) for p in kinds["param"]},
        user_attrs={a.key: json.loads(a.text) for a in kinds["user"]},
        system_attrs={a.key: json.loads(a.text) for a in kinds["system"]},
        intermediate_values={
            int(v.key): step_value(v.number, step_kind[v.text]) for v in kinds["step"]
        },
        trial_id=row.trial_id,
    )  # fmt: skip


def _heartbeat(session: Session, trial_id: int) -> None:
    """A trial's heartbeat at the database's clock (inside the statement where it can be)."""
    now = func.now() if _dialect(session) in UPSERT else session.execute(func.now()).scalar()
    _upsert(session, models.TrialHeartbeatModel, [], [{"trial_id": trial_id, "heartbeat": now}])


def _utc(local: datetime.datetime | None) -> datetime.datetime | None:
    """Optuna stores trial times as naive UTC."""
    return local and local.astimezone(datetime.UTC).replace(tzinfo=None)


class Heartbeat:
    """Records a running trial's heartbeat, so a killed worker's trial is seen to be stale.

    The first beat also writes what the trial has so far (its parameters)."""

    def __init__(self, study: optuna.Study, trial: optuna.trial.Trial) -> None:
        self.storage, self.trial_id = study._storage, trial._trial_id
        self.storage.record_heartbeat(self.trial_id)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        while not self.done.wait(HEARTBEAT_S):
            with contextlib.suppress(Exception):  # a dropped connection: the next beat retries
                self.storage.record_heartbeat(self.trial_id)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def live_workers(url: str, name: str) -> int:
    """Workers measuring right now: running trials whose heartbeat is fresh (one per worker)."""
    try:
        study = optuna.load_study(study_name=name, storage=TrialStorage(url))
    except KeyError:
        return 0
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    stale = set(study._storage._get_stale_trial_ids(study._study_id)) if running else set()
    return len([t for t in running if t._trial_id not in stale])
