"""TrialStorage: Optuna's tables written in few transactions, read back by plain Optuna."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState

from autotune import trials
from autotune.trials import TrialStorage

SPACE = {
    "granularity": CategoricalDistribution(["none", "full", "regional"]),
    "scale": FloatDistribution(0.5, 2.0),
}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/t.db"
    return request.getfixturevalue("postgres").url


def _study(url: str, name: str) -> optuna.Study:
    return optuna.create_study(
        study_name=name, storage=TrialStorage(url), load_if_exists=True,
        directions=["minimize", "minimize"], sampler=optuna.samplers.RandomSampler(seed=3),
    )  # fmt: skip


def test_every_trial_reads_back_the_same_through_plain_optuna(url: str) -> None:
    name = f"read-back-{time.monotonic_ns()}"
    study = _study(url, name)
    study.enqueue_trial({"granularity": "none", "scale": 1.0})
    for i in range(6):
        trial = study.ask(SPACE)
        trial.set_user_attr("key", f"k{i}")
        trial.set_user_attr("autotune", {"worker": "w", "speedup": 1.5 + i})
        trial.set_constraint("accuracy", float(i % 2))
        if i == 3:
            study.tell(trial, state=TrialState.FAIL)
        elif i == 4:
            for step, value in ((2, float("-inf")), (1, 0.25)):  # (report: single-objective)
                study._storage.set_trial_intermediate_value(trial._trial_id, step, value)
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, [1.0 + i, 10.0 / (i + 1) if i else float("inf")])
    running = study.ask(SPACE)  # left running: its parameters written by a heartbeat
    study._storage.record_heartbeat(running._trial_id)

    here = study.get_trials()  # this process's own trials, from memory
    plain = optuna.load_study(study_name=name, storage=url).get_trials()
    read = optuna.load_study(study_name=name, storage=TrialStorage(url)).get_trials()
    assert len(here) == len(plain) == len(read) == 7
    assert [t.values for t in plain[:3]] == [[1.0, float("inf")], [2.0, 5.0], [3.0, 10 / 3]]
    assert plain[4].intermediate_values == {1: 0.25, 2: float("-inf")}
    for a, b in [*zip(here, plain, strict=True), *zip(read, plain, strict=True)]:
        assert a.intermediate_values == b.intermediate_values
        assert (a.number, a.state, a.values, a.params, a.distributions, a.user_attrs) == (
            b.number, b.state, b.values, b.params, b.distributions, b.user_attrs)  # fmt: skip
        assert a.system_attrs == b.system_attrs
        assert a.datetime_start == b.datetime_start
        if a.state.is_finished():
            assert abs((a.datetime_complete - b.datetime_complete).total_seconds()) < 1e-3
    assert [t.state for t in plain].count(TrialState.COMPLETE) == 4
    assert plain[0].params == {"granularity": "none", "scale": 1.0}  # the enqueued one
    assert plain[6].state == TrialState.RUNNING and set(plain[6].params) == set(SPACE)
    assert [t.system_attrs["constraints:accuracy"] for t in plain[:6]] == [0, 1, 0, 1, 0, 1]
    assert plain[5].user_attrs["autotune"]["speedup"] == 6.5


def test_a_trial_is_born_beating_and_a_stale_end_stands(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trials, "GRACE_S", 1)
    name = f"stale-{time.monotonic_ns()}"
    study = _study(url, name)
    trial = study.ask(SPACE)  # no heartbeat thread: the worker "dies" right after ask
    time.sleep(2.5)
    other = optuna.load_study(study_name=name, storage=TrialStorage(url))
    optuna.storages.fail_stale_trials(other)
    assert other.get_trials()[0].state == TrialState.FAIL
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        study.tell(trial, [1.0, 2.0])  # the dead worker comes back: the FAIL stands
    plain = optuna.load_study(study_name=name, storage=url).get_trials()
    assert plain[0].state == TrialState.FAIL and plain[0].values is None
