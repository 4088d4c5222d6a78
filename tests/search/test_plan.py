"""A search that plans its own cost and keeps its time budget (autotune/search/plan.py)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from autotune.search.plan import Plan
from autotune.strategy import Strategy
from autotune.trial import timing
from autotune.trial.measurement import Latency, Measurement
from autotune.workload import Settings

ROOT = Path(__file__).resolve().parents[2]


def plan_line(*args: Any, **kwargs: Any) -> str:
    """The plan's line (a module this change added: found when a test runs, so that on the
    code before it only the tests that read the line fail)."""
    return importlib.import_module("autotune.search.plan_line").line(*args, **kwargs)


BUDGET_S = 40.0


def test_the_fewest_deciding_rounds_are_those_the_sign_test_can_decide_in() -> None:
    n = timing.deciding_rounds()
    assert timing.sign_test([1.0] * n, [0.0] * n) < timing.ALPHA  # every round one way: shown
    assert timing.sign_test([1.0] * (n - 1), [0.0] * (n - 1)) >= timing.ALPHA  # never
    assert n == 6


def test_rounds_end_by_their_deadline_but_not_before_the_least() -> None:
    calls = {"a": lambda: time.sleep(0.02), "b": lambda: time.sleep(0.02)}
    began = time.time()
    samples = timing.interleave(calls, 1000, lambda c: c(), deadline=began + 0.5, least=3)
    # ends by its deadline, not after 1000 rounds (40 s); the slack is for a loaded machine
    assert 3 <= timing.rounds_of(samples) < 20 and time.time() - began < 2.0
    past = timing.interleave(calls, 1000, lambda c: c(), deadline=began, least=4)
    assert timing.rounds_of(past) == 4  # the deadline had passed: the least rounds still run
    free = timing.interleave(calls, 7, lambda c: c())
    assert timing.rounds_of(free) == 7  # no deadline: every round


def baseline(eager_ms: float, rounds: int, child_s: float) -> Measurement:
    m = Measurement({"granularity": "none"}, {}, {}, "ok")
    m.latency = Latency.from_samples([eager_ms / 1e3] * 5)
    m.timings = {"startup_s": 2.0, "child_s": child_s, "timing_s": rounds * 2 * eager_ms / 1e3,
                 "rounds": float(rounds)}  # fmt: skip
    return m


def test_a_burst_of_load_in_one_baseline_round_does_not_inflate_a_round_s_cost() -> None:
    """Five eager calls of 10 ms, one of them 100 ms under a burst of load: the plan's round
    is its typical one (20 ms: eager against eager), not their mean (56 ms), which made every
    trial look three times dearer and cut the search short."""
    quiet, burst = Plan(600.0, iters=5), Plan(600.0, iters=5)
    quiet.learn_baseline(baseline(10.0, 5, child_s=5.0))
    m = baseline(10.0, 5, child_s=5.0)
    m.latency = Latency.from_samples([0.01, 0.01, 0.1, 0.01, 0.01])
    m.timings["timing_s"] = 2 * (0.01 * 4 + 0.1)
    burst.learn_baseline(m)
    assert quiet.round_s == pytest.approx(0.02)
    assert burst.round_s == pytest.approx(0.02, rel=0.01), burst.round_s
    assert burst.eager_ms == pytest.approx(10.0)  # the median, as before


def test_the_plan_says_what_fits_and_when_nothing_can_be_decided() -> None:
    roomy = Plan(3600.0, iters=20)
    roomy.learn_baseline(baseline(50.0, 20, child_s=5.0))
    line = plan_line(roomy, 8, ["inductor"], traffic=False)
    assert line.startswith("plan: eager 50 ms per call here; a trial of 20 rounds")
    assert "8 trials fit in 60 min" in line
    served = plan_line(roomy, 8, ["inductor"], traffic=True, per="request")
    assert served.startswith("plan: eager 50 ms per request here")  # a continuous workload's
    tight = Plan(60.0, iters=20)
    tight.learn_baseline(baseline(2000.0, 20, child_s=90.0))  # 2 s a call: 6 rounds take 24 s
    line = plan_line(tight, 8, ["inductor"], traffic=True)
    assert "cannot decide anything here" in line and "raise --time-budget" in line
    assert not tight.may_start(["inductor"], traffic=True)
    assert roomy.may_start(["inductor"], traffic=True)
    free = Plan(None, iters=20)
    free.learn_baseline(baseline(50.0, 20, child_s=5.0))
    assert plan_line(free, 8, ["eager"], traffic=False).endswith("(no time budget)")
    settings = Settings(iters=20)
    assert free.for_trial(settings, ["eager"], False, 3) == settings  # no budget: nothing cut
    cut = roomy.for_trial(settings, ["eager"], False, 3)
    assert cut.least == timing.deciding_rounds() and time.time() < cut.deadline < roomy.deadline


def search(model: str, folder: Path) -> tuple[dict, str, float]:
    argv = [sys.executable, "-m", "autotune.cli", "search", "--model", f"tests.models:{model}",
            "--allow-code", f"tests.models:{model}", "--backend", "eager,aot_eager",
            "--granularity", "none,full,regional", "--fullgraph", "false", "--trials", "8",
            "--iters", "400", "--warmup", "1", "--starts", "cold", "--time-budget",
            f"{BUDGET_S:g}s", "--rungs", "full", "--no-progress", "--json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    began = time.monotonic()
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env, timeout=300)
    wall = time.monotonic() - began
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout), done.stderr, wall


def rounds_timed(folder: Path) -> float:
    """The timed rounds of every trial of the study in ``folder``, the baseline's included."""
    from autotune.storage import Store

    store = Store(f"sqlite:///{folder}/studies/autotune.db")
    (name,) = [s.name for s in store.studies()]
    return sum(r.payload.get("timings", {}).get("rounds", 0.0)
               for r in store.measurements(name) if r.measured)  # fmt: skip


@pytest.mark.long
def test_a_budget_is_kept_whole_and_a_quicker_model_measures_more(tmp_path: Path) -> None:
    """Two searches of 40 s each, on a machine of its own (.ci/run's ``-m long`` line runs its
    tests one at a time: on a loaded machine both baselines start past their share and stop
    at their least rounds, and no trial fits).
    100 ms a call against 400 rounds a trial: unbounded, one trial alone would take 80 s.
    Every trial times its rounds to its share of the budget (``--rungs full``): with the cheap
    rung, the sleeping model's trials, which compiling cannot speed up, all stopped after 6
    rounds, both searches measured the whole space in well under the budget, and only the
    baselines' rounds told them apart (in CI once the quick one's timed its least, 3, and
    the test failed).
    Under a 40 s budget the whole search (baseline, trials, confirmation) ends within 10 % of
    it and prints its plan first; the same model ten times quicker, under the same budget,
    times more rounds or measures more trials."""
    slow_dir, quick_dir = tmp_path / "slow", tmp_path / "quick"
    slow_dir.mkdir(), quick_dir.mkdir()
    slow, told, wall = search("pausing", slow_dir)
    assert "plan: eager " in told and "ms per call here" in told
    per_call = float(told.split("plan: eager ")[1].split(" ms per call")[0])
    assert 90 <= per_call <= 200  # the model's 100 ms, read here
    assert wall <= 1.1 * BUDGET_S + 5, f"{wall:.1f} s"  # +5: python's start and torch's import
    assert slow["seconds"]["total"] <= 1.1 * BUDGET_S and slow["budget_s"] == BUDGET_S
    assert set(slow["seconds"]) == {"compile", "first pass", "steady state", "confirmation",
                                    "reference", "rest", "total"}  # fmt: skip
    quick, told, quick_wall = search("pausing_briefly", quick_dir)
    assert quick_wall <= 1.1 * BUDGET_S + 5
    more_rounds = rounds_timed(quick_dir) > rounds_timed(slow_dir)
    assert more_rounds or quick["measured"] > slow["measured"], told


def traffic_baseline(round_s: float, shapes: int) -> Measurement:
    m = baseline(round_s / (2 * shapes) * 1e3, 3, child_s=30.0)
    m.timings["timing_s"] = 3 * round_s
    m.traffic = {"steady": [{"seq_len": 16 * (i + 1), "weight": 1 / shapes}
                            for i in range(shapes)]}  # fmt: skip
    return m


def test_a_compiled_trial_s_first_pass_over_a_traffic_is_counted_as_its_calls() -> None:
    """The main job's baseline restricted to AVX2 (bf16 at 3.9 s a call, 2026-11-27): a first
    pass of 103 s, 3 rounds of one shape in 25 s. Its one compiled trial then took 404 s
    (first pass 351 s: each shape called by eager, the compiled model and the probe), and
    with the confirmation the run ended at 813 s of 600. Counted as its calls, the trial is
    estimated near what it took: with nothing kept to confirm before a trial is faster than
    eager, it starts 150 s into 10 minutes (and ends by 600 s), not 200 s in."""
    m = baseline(3900.0, 3, child_s=140.5)
    m.timings.update(startup_s=3.3, first_s=102.9, timing_s=25.0)
    m.traffic = {"steady": [{"seq_len": 32, "weight": 1.0}]}
    backends = ["eager", "aot_eager", "inductor"]
    for spent_s, fits in ((150.0, True), (200.0, False)):
        plan = Plan(600.0, time.time() - spent_s, iters=6)
        plan.learn_baseline(m)
        least = timing.deciding_rounds()
        assert 0.8 * 404.5 < plan.trial_s("eager", least) < 1.2 * 404.5
        assert time.time() + plan.trial_s("inductor", least) < plan.started + 600.0 or not fits
        assert plan.may_start(backends, traffic=True) is fits
        said = plan_line(plan, 8, ["eager", "inductor"], traffic=True)
        assert ("cannot decide anything here" in said) is not fits, said


def test_dear_rounds_over_a_traffic_time_fewer_steady_shapes() -> None:
    """A round of 8 shapes at 4 s a shape: the confirmation's 3 processes of 12 rounds would
    take 1152 s of a 600 s budget, so a round times fewer shapes (and says so); cheap rounds
    keep every shape."""
    from autotune import traffic

    dear = Plan(600.0, iters=6)
    dear.learn_baseline(traffic_baseline(32.0, 8))
    assert 1 <= dear.steady < 8 and dear.round_s == pytest.approx(4.0 * dear.steady)
    assert f"each round times {dear.steady} of the traffic's 8 shapes" in plan_line(
        dear, 8, ["inductor"], traffic=True
    )
    settings = Settings(iters=6)
    assert dear.for_trial(settings, ["inductor"], True, 4).steady == dear.steady
    assert dear.for_confirmation(settings).steady == dear.steady
    cheap = Plan(600.0, iters=6)
    cheap.learn_baseline(traffic_baseline(0.8, 8))
    assert cheap.steady == 8 and "each round times" not in plan_line(cheap, 8, ["eager"], True)
    requests = tuple((1, n) for n in range(16, 144, 8))  # 16 distinct shapes
    assert len(traffic.steady(requests, most=dear.steady)) == dear.steady
    assert len(traffic.steady(requests)) == traffic.STEADY_SHAPES


def test_a_trial_s_rounds_time_the_steady_shapes_its_plan_allows() -> None:
    """The child honours the plan's ``steady``: a traffic of 12 lengths is timed over 3 steady
    shapes instead of 8, and its rounds end by the deadline though 400 were asked for."""
    import dataclasses

    from autotune.catalog import ModelRef
    from autotune.strategy import Strategy
    from autotune.trial.parent import measure
    from autotune.workload import Workload

    settings = Settings(iters=400, warmup=1, starts=("cold",), timeout_s=300)
    planned = dataclasses.replace(settings, steady=3, deadline=time.time() + 25, least=6)
    w = Workload(seq_len="8,12,16,20,24,28,32,36,40,44,48,52", requests=12)
    ref, strategy = ModelRef("tests.models:tiny_llama"), Strategy.create("full", "eager")
    m = measure(ref, w, strategy, planned)
    assert m.ok and len(m.traffic["steady"]) == 3  # type: ignore[index]
    assert 6 <= m.timings["rounds"] < 400


def test_the_confirmation_s_share_grows_with_the_rivals_measured() -> None:
    """Nothing is kept before a trial is faster than eager (keeping three processes' time for
    it left a 10-minute main job no room for its first trial); then a process for each
    candidate, the pick and its rivals at most."""
    plan = Plan(600.0, iters=6)
    plan.learn_baseline(traffic_baseline(5.0, 8))
    first = plan.confirmation_s(["inductor"], traffic=True)
    before = plan_line(plan, 8, ["inductor"], traffic=True)
    plan.candidates = 1
    second = plan.confirmation_s(["inductor"], traffic=True)
    plan.candidates = 5
    most = plan.confirmation_s(["inductor"], traffic=True)
    assert first == 0.0 < second < most
    # the plan line, printed before any trial, says what the share grows to (the main job's
    # said 1.5 min, and its confirmation of two rivals took 3.2 to 4.2)
    assert f"(nothing kept to confirm until a trial is faster than eager, up to " \
        f"{most / 60:.1f} min then)" in before  # fmt: skip
    assert f"({most / 60:.1f} min kept to confirm)" in plan_line(plan, 8, ["inductor"], True)
    plan.candidates = 9
    assert plan.confirmation_s(["inductor"], traffic=True) == most  # the pick and 2 rivals


def test_a_baseline_under_a_deadline_times_the_steady_shapes_that_fit() -> None:
    """The eager baseline's rounds have a deadline under a budget but no ``steady`` from the
    plan (it has learned nothing yet): it times as many steady shapes as let its warm-up and
    least rounds end by the deadline. Before, a baseline at 6.96 s a call timed all 8 shapes
    through 3 rounds and took 10 min 20 s of a 10 min budget (AVX2, bfloat16)."""
    from autotune.traffic import STEADY_SHAPES
    from autotune.trial.request import Request
    from autotune.trial.scenarios.steady import fitting_shapes

    def request(deadline: float) -> Request:
        return Request("trial", {}, {}, {}, 400, 1, deadline=deadline, least=3)

    soon = time.time() + 60.0  # 60 s: 1 warm-up and 3 rounds of 2 calls a shape
    assert fitting_shapes(request(soon), [7000.0] * 16) == 1  # 7 s a call: 56 s a shape
    assert fitting_shapes(request(soon), [2000.0] * 16) == 3  # 2 s a call: 16 s a shape
    assert fitting_shapes(request(soon), [10.0] * 16) == STEADY_SHAPES  # cheap: all of them
    assert fitting_shapes(request(time.time() - 1), [10.0] * 16) == 1  # past: still one
    assert fitting_shapes(request(0.0), [7000.0] * 16) == STEADY_SHAPES  # no deadline: all
    # a confirmation's eager is untimed (0 ms): it divided by zero under a deadline
    assert fitting_shapes(request(soon), [0.0] * 16) == STEADY_SHAPES


def test_a_real_baseline_past_its_deadline_times_one_steady_shape() -> None:
    from autotune import ModelRef, Strategy, Workload, measure

    w = Workload(seq_len="8,12,16,20,24,28,32,36,40,44,48,52", requests=12)
    ref, eager = ModelRef("tests.models:tiny_llama"), Strategy.create("none")
    past = measure(ref, w, eager, Settings(iters=5, warmup=1, deadline=time.time(), least=3))
    free = measure(ref, w, eager, Settings(iters=5, warmup=1))
    assert past.ok and free.ok
    assert len(past.traffic["steady"]) == 1  # type: ignore[index]
    assert len(free.traffic["steady"]) == 8  # type: ignore[index]  # the traffic's default


def test_no_reference_is_computed_when_no_trial_fits_the_budget(tmp_path: Path) -> None:
    """A search whose budget cannot fit one trial after its baseline leaves the reference out
    (it would judge nothing); one with room computes it before its first trial."""
    from autotune.search import open_search
    from autotune.search.baseline import baseline
    from autotune.search.state import Lines
    from tests.helpers import fast_spec

    for budget_s, kept in ((1.0, False), (3600.0, True)):
        spec = fast_spec(trials=2, time_budget=f"{budget_s:g}s")
        search = open_search(spec, f"sqlite:///{tmp_path}/{kept}.db")
        search.plan = Plan(spec.time_budget_s, time.time(), iters=spec.settings.iters)
        baseline(search, Lines())
        assert search.plan.may_start(search.backends, search.traffic) is kept
        assert (search.store.reference(search.name) is not None) is kept


def test_a_trial_s_cost_counts_its_cheap_rung_over_a_traffic() -> None:
    """Over a traffic, a cheap rung times its own deciding rounds over 3 of the steady shapes
    before the full rounds: a trial's cost counts them, so that a trial whose full rounds fit
    but not with the rung's is not started (before, the rung's rounds ran past the trial's
    deadline); at one shape the rung's rounds are the full rounds' first and add nothing."""
    n = timing.deciding_rounds()
    plain, rung = Plan(600.0, iters=12), Plan(600.0, iters=12, rungs=True)
    for p in (plain, rung):
        p.learn_baseline(traffic_baseline(8.0, 8))  # 1 s a steady shape, 8 shapes a round
    assert plain.rung_s() == 0.0 and rung.rung_s() == pytest.approx(n * 8.0 * 3 / 8)
    least = plain.trial_s("eager", n)
    assert rung.trial_s("eager", n) == pytest.approx(least + n * 3.0)
    for p in (plain, rung):  # the time left before the confirmation fits the full rounds only
        p.started = time.time() - 600.0 + p.confirmation_s(["eager"], True) + least + n
    assert plain.may_start(["eager"], True) and not rung.may_start(["eager"], True)
    # a trial that went on to its full rounds: its compile is what is left of its wall
    m = baseline(10.0, n, child_s=5.0)
    m.rung, m.timings["rounds"] = "full", float(n)
    assert rung.fixed_s is not None and rung.round_s is not None
    wall = rung.fixed_s + rung.rung_s() + n * rung.round_s + 7.0
    rung.learn_trial(Strategy.create("full", "eager"), m, wall)
    assert rung.compile_s("eager") == pytest.approx(7.0)
    stopped = baseline(10.0, n, child_s=5.0)
    stopped.rung, stopped.timings["rounds"] = "cheap", float(n)
    rung.learn_trial(Strategy.create("full", "aot_eager"), stopped,
                     rung.fixed_s + rung.rung_s() + 3.0)  # fmt: skip
    assert rung.compile_s("aot_eager") == pytest.approx(3.0)
    one = Plan(600.0, iters=12, rungs=True)  # one shape: no rounds of the rung's own
    one.learn_baseline(baseline(100.0, 3, child_s=5.0))
    assert one.rung_s() == 0.0
    few = Plan(600.0, iters=6, rungs=True)  # no more rounds than the rung's: no rung
    few.learn_baseline(traffic_baseline(8.0, 8))
    assert few.rung_s() == 0.0


def test_a_search_s_worker_processes_are_a_share_of_its_time_line() -> None:
    """``search --workers K``: the trials ran in the worker processes, so the time line names
    their share instead of leaving it all in the rest."""
    plan = Plan(600.0, iters=20)
    plan.spent.update({"steady state": 5.0, "workers": 270.0, "confirmation": 20.0})
    split = plan.split(300.0)
    assert split["worker processes"] == 270.0 and split["rest"] == 5.0
    assert "worker processes" not in Plan(600.0).split(10.0)


def test_a_last_trial_s_rounds_leave_room_for_what_its_child_does_after_them() -> None:
    """CI, 2026-11-28: a 40 s search's last trial got all that was left for trials, so its
    rounds ran to the very time its process was stopped at; what its child does past its
    rounds (its probes, its artefact, its exit) then ran past it, and the trial was stopped
    with all it had measured. Its rounds now end that, and a round's overshoot, earlier; as
    much as the slowest child here took past its rounds, once one has been seen."""
    from autotune.search import plan as planning

    plan = Plan(120.0, iters=400)
    plan.learn_baseline(baseline(100.0, 6, child_s=3.0))
    assert plan.round_s is not None
    settings = Settings(iters=400)
    last = plan.for_trial(settings, ["eager"], False, 1)
    assert last.stop_at - last.deadline >= planning.AFTER_S + plan.round_s
    m = baseline(100.0, 10, child_s=6.0)  # a trial whose child took 3 s past its rounds
    m.timings.update(startup_s=0.1, build_s=0.2, first_s=0.5, warmup_s=0.2)
    m.wall_s = 0.1 + 0.2 + 0.5 + 0.2 + m.timings["timing_s"] + 3.0
    plan.learn_trial(Strategy.create("full", "eager"), m, m.wall_s)
    assert plan.after_s == pytest.approx(3.0)
    last = plan.for_trial(settings, ["eager"], False, 1)
    assert last.stop_at - last.deadline == pytest.approx(3.0 + plan.round_s, abs=0.05)
    early = plan.for_trial(settings, ["eager"], False, 8)  # its share ends earlier still
    assert early.deadline < last.deadline and early.stop_at == pytest.approx(last.stop_at)
    confirming = plan.for_confirmation(settings)
    assert confirming.stop_at - confirming.deadline >= 3.0 + plan.round_s


def test_a_preset_level_is_priced_apart_from_the_other_inductor_trials() -> None:
    """The main job over a continuous traffic (gemma-2b, two layers): a level's warm-up
    compiles transformers' default 8,192-token batch, 105 s, where the traffic's other
    Inductor trials took 25-60 s. Priced alike, their mean made a fitted Inductor trial that
    fits look as if it did not, and a level look as if it did. Priced apart, with 60 s left
    for trials, the fitted one starts and the next level does not; an unmeasured level is
    priced at its backend's cost, never below it."""
    from autotune.search.deduction import priced_as
    from autotune.strategy import batching

    plan = Plan(600.0, iters=6)
    plan.learn_baseline(baseline(10.0, 6, child_s=3.0))
    assert plan.fixed_s is not None and plan.round_s is not None
    level1, level2 = (Strategy.create(**batching.anchor_fields(n)) for n in (1, 2))
    fitted = Strategy.create(backend="inductor", batching="q=64+kv=64")
    assert priced_as(level1) == priced_as(level2) != priced_as(fitted) == "inductor"
    assert plan.compile_s(priced_as(level2)) == plan.compile_s("inductor") == 40.0  # priors
    n = timing.deciding_rounds()
    measured = baseline(10.0, n, child_s=3.0)
    plan.learn_trial(level1, measured, plan.fixed_s + n * plan.round_s + 105.0)
    assert plan.compile_s(priced_as(level2)) == pytest.approx(105.0)
    assert plan.compile_s("inductor") == 40.0  # the other Inductor trials: still the prior
    plan.learn_trial(fitted, measured, plan.fixed_s + n * plan.round_s + 30.0)
    assert plan.compile_s("inductor") == pytest.approx(30.0)
    assert plan.compile_s(priced_as(level2)) == pytest.approx(105.0)
    plan.started = time.time() - 600.0 + 5.0 + 60.0  # 60 s left for trials, the tail after
    other = Strategy.create(backend="inductor", batching="q=32+kv=64")
    assert plan.fitting([level2, other], plan_backends(level2, other), True) == [other]
    cheap = Plan(600.0, iters=6)  # a level before any: never below its backend's measured
    cheap.learn_baseline(baseline(10.0, 6, child_s=3.0))
    assert cheap.fixed_s is not None and cheap.round_s is not None
    cheap.learn_trial(fitted, measured, cheap.fixed_s + n * cheap.round_s + 70.0)
    assert cheap.compile_s(priced_as(level1)) == pytest.approx(70.0)


def plan_backends(*strategies: Strategy) -> list[str]:
    from autotune.search.deduction import priced_as

    return sorted({priced_as(s) for s in strategies})
