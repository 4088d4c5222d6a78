"""Cheap rungs (autotune/trial/rungs.py): a compiled trial that cannot reach the study's front
stops after a few rounds, one that may goes on to the full rounds in the same process, and a
measurement made at the cheap fidelity is never a pick."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from autotune.catalog import ModelRef
from autotune.choice.selection import candidates, choose, pick
from autotune.choice.verdict import CHEAP, answer, exclusions
from autotune.errors import AutotuneError
from autotune.search import Search, open_search, run
from autotune.search.spec import StudySpec
from autotune.storage import Stored
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.trial.request import Request
from autotune.trial.rungs import Rung, applies, bound
from autotune.trial.scenarios import Inference, TrafficTrial, begin
from autotune.trial.timing import deciding_rounds
from autotune.workload import Settings, Workload
from tests.helpers import S, hand_rows, point, stored

MATMULS = ModelRef("tests.models:matmuls")
SLOW = Strategy.create("full", "tests.models:dawdling_backend")  # 20 ms slower a call
FAST = Strategy.create("full", "tests.models:memo_backend")  # computes once
EAGER_ONLY = ((0.0, 1.0, None),)  # a front of eager alone: no compile, its own speed
SLOW_COMPILE = ((1e6, 2.0, None),)  # a front whose one point compiles slower than anything
ROUNDS = deciding_rounds()
TIMED = Settings(iters=12, warmup=1, starts=("cold",), timeout_s=300)


def test_a_strategy_is_stopped_only_where_a_front_point_beats_its_best_hope() -> None:
    assert bound([1.0, 1.0], [2.0, 4.0]) == 1.0  # every round slower: no hope past eager's
    assert bound([1.0, 3.0], [2.0, 1.0]) == 3.0  # its best round
    rung = Rung(ROUNDS, ((0.0, 1.0, None), (5.0, 2.0, None)))
    slower = ([1.0] * 6, [2.0] * 6)
    assert rung.verdict(3.0, *slower).startswith("stopped after 6 cheap rounds")  # eager beats
    assert rung.verdict(3.0, [1.0] * 6, [0.4] * 6) == ""  # 2.5x: nothing beats it
    assert rung.verdict(6.0, [1.0] * 6, [0.55] * 6) != ""  # 1.8x: the 2x point compiles quicker
    assert rung.verdict(4.0, [1.0] * 6, [0.55] * 6) == ""  # ... but not quicker than 4 s
    lean = Rung(ROUNDS, ((0.0, 1.0, 500.0),))  # memory is an objective: eager uses 500 MB
    assert lean.verdict(3.0, *slower, memory_mb=400.0) == ""  # less memory: it may reach
    assert lean.verdict(3.0, *slower, memory_mb=600.0) != ""
    assert applies(("compile", "latency"), "knee") and applies(("compile", "decode", "memory"), "")
    assert not applies(("warm", "latency"), "knee")  # a later start: not measured by the rung
    assert not applies(("compile", "ttft"), "knee")
    assert not applies(("compile", "latency"), "restarts:10:100")  # counts later starts


def scenario(kind: type, workload: Workload, strategy: Strategy, front: tuple) -> Measurement:
    """One trial's scenario with a cheap rung against ``front``, in this process."""
    torch._dynamo.reset()
    request = Request.trial(MATMULS, workload, strategy, TIMED).but(rung=ROUNDS, front=front)
    return kind(begin(request)).run()


def test_a_trial_stops_after_the_cheap_rung_only_where_it_cannot_reach_the_front() -> None:
    w = Workload(device="cpu")
    stopped = scenario(Inference, w, SLOW, EAGER_ONLY)
    assert stopped.ok and stopped.feasible and stopped.rung == "cheap"
    assert stopped.timings["rounds"] == ROUNDS and len(stopped.latency.samples_ms) == ROUNDS
    assert stopped.reason.startswith(f"stopped after {ROUNDS} cheap rounds")
    reaching = scenario(Inference, w, SLOW, SLOW_COMPILE)  # the same strategy may reach this
    assert reaching.rung == "full" and reaching.timings["rounds"] > ROUNDS
    assert not reaching.reason
    faster = scenario(Inference, w, FAST, EAGER_ONLY)
    assert faster.rung == "full" and faster.timings["rounds"] > ROUNDS


def test_a_traffics_cheap_rung_times_a_sample_of_its_steady_shapes() -> None:
    w = Workload(device="cpu", seq_len="8,16,24,32,40,48", requests=24)  # 6 steady shapes
    stopped = scenario(TrafficTrial, w, SLOW, EAGER_ONLY)
    assert stopped.rung == "cheap" and stopped.timings["rounds"] == ROUNDS
    assert len(stopped.traffic["steady"]) == 3  # the sample's: its steady state
    assert sum(s["weight"] for s in stopped.traffic["steady"]) == pytest.approx(1.0)
    reaching = scenario(TrafficTrial, w, SLOW, SLOW_COMPILE)
    assert reaching.rung == "full" and len(reaching.traffic["steady"]) == 6


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Search]]:
    """Two real searches (children, Optuna, SQLite) of eager and two backends on a model of a
    few ms a call: one with cheap rungs (the default), one with ``rungs = "full"``."""
    folder = tmp_path_factory.mktemp("rungs")
    root = str(Path(__file__).resolve().parents[2])
    found = {}
    with pytest.MonkeyPatch.context() as env:
        env.chdir(folder)
        env.setenv("PYTHONPATH", root)
        env.delenv("AUTOTUNE_STORAGE", raising=False)
        env.setenv("AUTOTUNE_STUDIES", str(folder / "studies"))
        for rungs, backends in (("cheap", f"{SLOW.backend},{FAST.backend}"),
                                ("full", SLOW.backend)):  # fmt: skip
            spec = StudySpec.from_sources(
                None, model=MATMULS.name, device="cpu", backend=backends,
                granularity="none,full", dynamic="none", fullgraph="false", iters=12,
                warmup=1, starts="cold", timeout=300, trials=3, rungs=rungs, study=rungs,
                time_budget="none",
            )  # fmt: skip
            search = open_search(spec, f"sqlite:///{folder}/{rungs}.db")
            run(search)
            found[rungs] = search
        yield found


def rows_of(search: Search) -> dict[str, Measurement]:
    rows = search.store.measurements(search.name)
    return {r.key: Measurement.from_dict(r.payload) for r in rows}


def test_a_search_stops_what_cannot_reach_the_front_and_never_picks_it(
    searched: dict[str, Search],
) -> None:  # fmt: skip
    search = searched["cheap"]
    found = rows_of(search)
    slow, fast = found[SLOW.key], found[FAST.key]
    assert slow.feasible and slow.rung == "cheap" and slow.timings["rounds"] == ROUNDS
    assert fast.rung == "full" and fast.timings["rounds"] > ROUNDS
    assert found["none"].rung == ""  # the baseline has no rung
    rows = search.store.measurements(search.name)
    assert SLOW.key not in {p.key for p in candidates(rows)}
    assert SLOW.key in {p.key for p in candidates(rows, cheap=True)}  # what the surrogate reads
    chosen, points, _ = choose(rows, "fastest", search.spec.objectives)
    assert chosen.key == FAST.key and SLOW.key not in {p.key for p in points}
    why = {e.key: e.why for e in exclusions(rows)}
    assert why == {SLOW.key: CHEAP}
    told = {t.user_attrs.get("key"): t.user_attrs.get("rung") for t in search.optuna.trials}
    assert told[SLOW.key] == "cheap" and told[FAST.key] == "full"


def test_rungs_full_times_every_round(searched: dict[str, Search]) -> None:
    search = searched["full"]
    slow = rows_of(search)[SLOW.key]
    assert search.spec.rungs == "full" and search.rung(TIMED) is None
    assert slow.rung == "" and slow.timings["rounds"] > ROUNDS  # the same strategy, all rounds
    cheap = searched["cheap"].rung(TIMED)  # the default hands the front: eager's and FAST's
    assert cheap is not None and cheap.rounds == ROUNDS and (0.0, 1.0, None) in cheap.front
    assert len(cheap.front) == 2 and searched["cheap"].rung(Settings(iters=ROUNDS)) is None


def test_a_cheap_measurement_is_never_the_pick() -> None:
    rows = hand_rows()  # B (10 s, 2 ms) is the fastest that passed
    marked = [stored(r.key, r.trial_number, {**r.payload, "rung": "cheap"})
              if r.key == S["B"].key else r for r in rows]  # fmt: skip
    for policy in ("fastest", "amortized:1000000", "latency-budget:3"):
        assert pick(candidates(rows), policy).key == S["B"].key  # measured in full: the pick
        if policy.startswith("latency-budget"):  # B alone was within it
            with pytest.raises(AutotuneError, match="latency budget"):
                pick(candidates(marked), policy)
        else:
            assert pick(candidates(marked), policy).key != S["B"].key


def test_the_verdict_says_when_every_compiled_strategy_stopped_cheap() -> None:
    rows = [stored("none", 0, point(S["none"], 0.0, 10.0))]
    rows += [stored(S[k].key, i, {**point(S[k], 1.0 + i, 12.0), "rung": "cheap"})
             for i, k in enumerate("AC", 1)]  # fmt: skip
    said = answer(rows, "hand", {}, "knee").sentence
    assert said.startswith("don't compile: 2 compiled strategies passed, none ran faster")
    full: list[Stored] = [stored(r.key, r.trial_number, {**r.payload, "rung": ""}) for r in rows]
    assert "cheap rounds" not in answer(full, "hand", {}, "knee").sentence
