"""Served as measured (autotune/choice/as_served.py): a traffic confirmation's self-check, a
plain server loop against the strategy's trial; a strategy whose loop differs, or does not fit
the budget, is not confirmed."""

from __future__ import annotations

import copy
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.catalog import ModelRef
from autotune.choice.confirm import Confirmation
from autotune.choice.selection import choose
from autotune.ship import export
from autotune.strategy import Strategy
from autotune.trial import parent
from autotune.trial.measurement import Measurement
from autotune.workload import Settings, Workload
from tests.helpers import stored


def as_served():  # type: ignore[no-untyped-def]
    """The module under test, imported when a test runs (so that on the code before it, each
    test fails on its own rather than the whole module failing to collect)."""
    return importlib.import_module("autotune.choice.as_served")


MATMULS = ModelRef("tests.models:matmuls")
REQUESTS = ((1, 64), (1, 128), (1, 64), (1, 256))
TRAFFIC = Workload(traffic=REQUESTS)
QUICKER = Strategy.create("full", "tests.models:memo_backend", dynamic=False)
QUICK = Settings(iters=6, warmup=1, starts=("cold",), timeout_s=300)


def test_differences_name_each_request_the_loop_counted_otherwise() -> None:
    trial = {"compiles": [1, 0, 1, 0], "ran_eager": [2]}
    assert as_served().differences(trial, {**trial, "wrong": []}) == []
    loop = {"compiles": [1, 1, 1, 0], "ran_eager": [4], "wrong": [[3, "output 0: 9 of 9 out"]]}
    assert as_served().differences(trial, loop) == [
        "request 2 compiled 1 graph(s) in the loop, 0 in the trial",
        "requests 4 ran eager in the loop, compiled in the trial",
        "requests 2 ran compiled in the loop, eager in the trial",
        "request 3's outputs are not eager's: output 0: 9 of 9 out",
    ]
    assert as_served().differences(trial, {"compiles": [1], "ran_eager": []}) == [
        "the trial played 4 requests, the loop 1"
    ]


@pytest.fixture(scope="module")
def measured() -> Iterator[dict[str, Measurement]]:
    """Eager and a far quicker compiled strategy, each measured over the traffic."""
    yield {s.key: parent.measure(MATMULS, TRAFFIC, s, QUICK)
           for s in (Strategy.create("none"), QUICKER)}  # fmt: skip


def proved(trials: dict[str, Measurement], folder: Path, left: float | None = None) -> tuple:
    """The check on a confirmation that confirmed the quicker strategy 8x eager, the loop
    run for real; what it says, and how many loops it ran."""
    rows = [stored(k, i, m.to_dict()) for i, (k, m) in enumerate(trials.items())]
    _, points, _ = choose(rows, "fastest", ("compile", "latency"))  # the trials' own pick aside:
    assert all(m.ok for m in trials.values())  # on a loaded machine 6 rounds may not show it
    base = next(p.latency_ms for p in points if p.key == "none")
    key = QUICKER.key
    shown = Confirmation(key, key, 12, 1.0, [], latency_ms={key: base / 8}, speedup={key: 8.0})
    ran = []

    def serve(key: str) -> Measurement:
        ran.append(key)
        path = export.served_file(trials[key].strategy, TRAFFIC, folder / "best.json")
        return parent.serve(MATMULS, TRAFFIC, trials[key].strategy, str(path), QUICK)

    done = as_served().prove(shown, points, trials, "fastest", ("compile", "latency"), serve,
                           lambda: left)  # fmt: skip
    return done, ran, base


@pytest.mark.slow
def test_a_pick_its_plain_loop_agrees_with_stays_confirmed(measured: dict, tmp_path: Path) -> None:
    done, ran, base = proved(measured, tmp_path)
    assert ran == [QUICKER.key] and done.pick == QUICKER.key
    assert done.latency_ms[QUICKER.key] < base
    line = done.lines[-1]
    assert line.startswith(
        f"served as measured: {QUICKER.key}: 3 graphs compiled at requests "
        "1, 2, 4, 0 of 4 requests served eager, every output as eager's"
    ), line


@pytest.mark.slow
def test_a_pick_whose_trial_counted_otherwise_is_not_confirmed(
    measured: dict, tmp_path: Path
) -> None:
    """A trial that said request 2's compile never happened (as the first pass said of a
    stance's compiles before it was played in a server's order): the loop counts it."""
    trials = copy.deepcopy(measured)
    trials[QUICKER.key].traffic["compiles"][1] = 0
    done, ran, base = proved(trials, tmp_path)
    assert ran == [QUICKER.key] and done.pick == "none"
    assert done.latency_ms[QUICKER.key] == base
    assert done.lines[-2] == (f"not served as measured: {QUICKER.key}: request 2 compiled 1 "
                              "graph(s) in the loop, 0 in the trial; not confirmed")  # fmt: skip
    assert done.lines[-1].startswith("the pick is now none")


@pytest.mark.slow
def test_a_loop_that_does_not_fit_the_budget_is_not_run_and_its_rounds_stand(
    measured: dict, tmp_path: Path
) -> None:
    """The budget ended before the self-check: the candidate the rounds confirmed stays the
    pick, unchecked as served (before, it was dropped for eager)."""
    done, ran, base = proved(measured, tmp_path, left=0.0)
    assert ran == [] and done.pick == QUICKER.key and done.latency_ms[QUICKER.key] < base
    assert f"not served yet: {QUICKER.key}: its plain loop needs about" in done.lines[0]
    assert "0 s of the budget are left; its rounds stand, unchecked as served" in done.lines[0]


def test_served_times_are_judged_on_a_quiet_machine_and_said_under_load() -> None:
    """Five warm requests at 1.0x eager's time a token in the trial and 2.0x in the loop:
    beyond the trial's noise, so not served as measured, where the CPU was the two sides'
    own; where other processes took 60 % of it while the loop served (or the trial played its
    requests), the times are said and not judged, as the CI gate does with its rounds."""
    from autotune.trial.measurement import Latency

    n = 5
    trial_traffic = {"compiles": [0] * n, "recorded": [0] * n, "ran_eager": [],
                     "tpot_ms": [1.0] * n, "eager_tpot_ms": [1.0] * n,
                     "ttft_ms": [2.0] * n, "eager_ttft_ms": [2.0] * n}  # fmt: skip
    steady = Latency.from_samples([0.001] * 6)
    trial = Measurement(Strategy.create("full", "eager"), MATMULS, Workload(), "ok",
                        traffic=trial_traffic, latency=steady, eager_latency=steady,
                        ttft=steady, eager_ttft=steady)  # fmt: skip
    loop = {**trial_traffic, "tpot_ms": [2.0] * n, "wrong": []}
    (found,) = as_served().times(trial, loop)
    assert "2.00x eager's time a token in the loop, 1.00x in the trial" in found
    assert as_served().times(trial, {**loop, "others_cpu": 0.6}) == []
    assert "not judged: other processes took 60%" in as_served().agreed(
        "k", {**loop, "others_cpu": 0.6}, 1.0, trial_traffic, 0.6
    )
    loaded = Measurement(Strategy.create("full", "eager"), MATMULS, Workload(), "ok",
                         traffic=trial_traffic, latency=steady, eager_latency=steady,
                         ttft=steady, eager_ttft=steady,
                         timings={"first_others_cpu": 0.6})  # fmt: skip
    assert as_served().times(loaded, loop) == []
    assert as_served().times(trial, {**loop, "tpot_ms": [1.1] * n}) == []  # within its noise


def test_a_continuous_loop_agrees_over_the_traffic_or_says_where_it_does_not() -> None:
    """A continuous strategy's loop against its trial: the graphs compiled after the warm-up,
    each request's tokens, and (on a quiet machine) the median pass's times."""
    from autotune.trial.measurement import Latency

    steady = Latency.from_samples([0.010] * 6)
    c = {"graphs": 9, "first_tokens": [[1, 2], [3, 4, 5]],
         "steady": {"compiled": {"ttft_p50_ms": 8.0, "tpot_p50_ms": 4.0}}}  # fmt: skip
    w = Workload(kind="continuous", rate=40.0, seq_len="4..40", new_tokens="2..8", requests=2)
    trial = Measurement(Strategy.create("full", "eager"), MATMULS, w, "ok",
                        traffic={"continuous": c}, latency=steady, eager_latency=steady,
                        ttft=steady, eager_ttft=steady)  # fmt: skip
    loop = {"graphs": 9, "tokens": [[1, 2], [3, 4, 5]], "ttft_p50_ms": 8.5, "tpot_p50_ms": 4.1,
            "ready_s": 6.0, "through": "autotune.continuous_batching_config"}  # fmt: skip
    assert as_served().continuous_differences(trial, loop) == []
    assert (
        as_served()
        .continuous_agreed("k", trial, loop, 3.0)
        .startswith("served as measured: k: 9 graph(s) compiled after a warm-up of 6.0 s")
    )
    wrong = {**loop, "graphs": 12, "tokens": [[1, 2], [3, 9, 5]], "tpot_p50_ms": 9.0}
    assert as_served().continuous_differences(trial, wrong) == [
        "12 graph(s) compiled after the warm-up in the loop, 9 in the trial",
        "request 2's tokens are not the trial's",
        "its median pass took 9 ms a token in the loop, 4 ms in the trial (beyond its noise, "
        "±25%)",
    ]
    short = {**loop, "tokens": [[1, 2]]}
    assert as_served().continuous_differences(trial, short) == [
        "the trial played 2 requests, the loop 1"
    ]
    loaded = {**wrong, "others_cpu": 0.6}  # times said, not judged, under load
    assert len(as_served().continuous_differences(trial, loaded)) == 2
