"""Optuna's side: public API only, every parameter on every trial, a sampler kept off taken
strategies."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest

from autotune.search import sampler
from autotune.strategy import Strategy
from autotune.strategy.space import DIMENSIONS, Space

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"
PRIVATE = re.compile(r"optuna\.(storages\.)?_|\._storage\b|_trial_id|from optuna[\w.]*\._")


def test_no_module_uses_a_private_name_of_optuna() -> None:
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 20
    lines = [(p.name, i, ln) for p in sources for i, ln in enumerate(p.read_text().split("\n"))]
    hits = [f"{name}:{i}: {line.strip()}" for name, i, line in lines if PRIVATE.search(line)]
    assert hits == []
    assert PRIVATE.search("from optuna.storages._rdb import models")  # the pattern bites
    assert PRIVATE.search("study._storage.get_trial(t._trial_id)")


SPACE = Space.default("cpu").narrow(backend="inductor,aot_eager,eager", dynamic="none,false")
PARAMS = {*DIMENSIONS, "freezing", "cpp_wrapper", "max_autotune"}  # the fields, then the switches


def _study(name: str, seed: int = 0) -> tuple[optuna.Study, sampler.Steered]:
    sampler.quiet_optuna()
    steered = sampler.Steered(sampler.base_sampler(name, seed, 40), SPACE, seed)
    return optuna.create_study(directions=["minimize"] * 2, sampler=steered), steered


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random", "grid"])
def test_the_sampler_never_proposes_a_taken_strategy(sampler: str) -> None:
    study, steered = _study(sampler)
    members = SPACE.strategies()
    taken: set[str] = set()
    for i in range(len(members)):
        free = [s for s in members if s.key not in taken]
        steered.plan(free)
        trial = study.ask()
        s = SPACE.suggest(trial)
        assert s.key not in taken and set(trial.params) == PARAMS
        taken.add(s.key)
        study.tell(trial, [float(i % 5), float(i % 3)])
    assert taken == {s.key for s in members}  # every one once: no step wasted


def test_a_forced_strategy_is_the_trial_s_and_params_are_canonical() -> None:
    study, steered = _study("tpe")
    target = Strategy.create("regional", "aot_eager", dynamic=False)
    steered.plan(SPACE.strategies(), forced=target)
    trial = study.ask()
    assert SPACE.suggest(trial) == target
    assert trial.params == SPACE.params(target) and trial.params["mode"] == SPACE.mode[0]
    assert SPACE.params(Strategy.create("none")) == {
        "granularity": "none",
        **{n: getattr(SPACE, n)[0] for n in DIMENSIONS[1:]},
        **{n: False for n in SPACE.options},
    }


def test_nsga2_sees_the_whole_space_not_only_granularity() -> None:
    """The eager trial carries every parameter too, so the intersection search space that
    NSGA-II samples from is all five fields (it was {granularity}: NSGA-II was random)."""
    study, steered = _study("nsga2")
    steered.plan([Strategy.create("none")])
    first = study.ask()
    assert SPACE.suggest(first).key == "none" and set(first.params) == PARAMS
    study.tell(first, [0.0, 10.0])
    free = [s for s in SPACE.strategies() if s.key != "none"]
    for i in range(6):
        steered.plan(free)
        trial = study.ask()
        free.remove(SPACE.suggest(trial))
        study.tell(trial, [float(i), float(10 - i)])
    assert steered.base is not None
    inner = steered.base.infer_relative_search_space(study, study.trials[-1])
    assert set(inner) == PARAMS
