"""The budget buys the answer, as the plan and its line say it (autotune/search/plan.py,
plan_line.py): what can pay goes first, the
confirmation's share follows what needs confirming, "cannot decide anything" only below the
least budget that decides, and a search ends early only when its answer is decided."""

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

from autotune.choice.confirm import RIVALS
from autotune.search import sampler
from autotune.search.plan import Plan
from autotune.strategy import Strategy
from autotune.strategy.space import Space
from autotune.trial.measurement import Measurement
from autotune.trial.timing import deciding_rounds
from tests.helpers import point
from tests.search.test_plan import baseline

EAGER_CALL_MS = 2190.0  # the main job's eager call on a 2-core AVX2-only EPYC (float32)
FULL_EAGER = Strategy.create("full", "eager")
FULL_AOT = Strategy.create("full", "aot_eager")
FULL_INDUCTOR = Strategy.create("full", "inductor")
REGIONAL_INDUCTOR = Strategy.create("regional", "inductor")
SPACE = [Strategy.create("none"), FULL_EAGER, FULL_AOT, FULL_INDUCTOR, REGIONAL_INDUCTOR]
BACKENDS = ["aot_eager", "eager", "inductor"]
ROOT = Path(__file__).resolve().parents[2]


def added(where: str) -> Any:
    """A function this change added (``module:name``), found when a test runs, so that on the
    code before it each test fails on its own rather than the module failing to collect."""
    module, name = where.split(":")
    return getattr(importlib.import_module(module), name)


def plan_line(*args: Any, **kwargs: Any) -> str:
    return added("autotune.search.plan_line:line")(*args, **kwargs)


def needs_confirming(m: Measurement) -> bool:
    return added("autotune.choice.confirm:needs_confirming")(m)


def pays(s: Strategy) -> bool:
    return added("autotune.search.deduction:pays")(s)


def ending(*args: Any, **kwargs: Any) -> str:
    return added("autotune.cli.summary:ending")(*args, **kwargs)


def short_to_confirm(*args: Any, **kwargs: Any) -> str:
    return added("autotune.job.tuning:short_to_confirm")(*args, **kwargs)


def hold(*args: Any, **kwargs: Any) -> str:
    return added("autotune.search.loop:hold")(*args, **kwargs)


def unconfirmed(*args: Any, **kwargs: Any) -> Any:
    return added("autotune.choice.confirm:unconfirmed")(*args, **kwargs)


def avx2_main_job(budget_s: float, spent_s: float = 97.0) -> Plan:
    """The plan of the issue's run: eager 2.19 s a call, a trial of 6 rounds about 186 s (40 s
    of it Inductor's compile prior), the baseline done ``spent_s`` after the start."""
    plan = Plan(budget_s, time.time() - spent_s, iters=6, requests=16)
    plan.learn_baseline(baseline(EAGER_CALL_MS, 3, child_s=131.0))
    assert plan.trial_s("inductor", 6) == pytest.approx(186.0, abs=2.0)
    return plan


def measured(strategy: Strategy, ms: float, ok: bool = True) -> Measurement:
    """A compiled trial's measurement at ``ms`` a call against eager's 10 ms."""
    return Measurement.from_dict(point(strategy, 5.0, ms, ok=ok))


def test_the_main_job_on_an_avx2_cpu_can_decide_in_ten_minutes_and_tries_inductor_first() -> None:
    """Before, the confirmation's share for three processes was kept before any trial, the plan
    said "cannot decide anything" after 97 s of 600, and the one trial that fit on a rerun was
    full/eager, which cannot beat eager."""
    plan = avx2_main_job(600.0)
    assert plan.confirmation_s(BACKENDS, traffic=True) == 0.0  # nothing needs confirming yet
    assert plan.may_start(BACKENDS, traffic=True)
    line = plan_line(plan, 8, BACKENDS, traffic=True)
    assert "cannot decide" not in line, line
    assert "nothing kept to confirm until a trial is faster than eager" in line, line
    assert plan.promising(BACKENDS) == "inductor"
    first = plan.fitting(SPACE, BACKENDS, traffic=True)
    assert [s for s in first if s.granularity != "none"] == [FULL_INDUCTOR, REGIONAL_INDUCTOR]
    # once a trial that can pay is measured, the replaying backends may follow
    plan.learn_trial(FULL_INDUCTOR, measured(FULL_INDUCTOR, 12.0), 180.0)
    assert plan.paid and FULL_EAGER in plan.fitting(SPACE, BACKENDS, traffic=True)


def test_replaying_backends_are_not_held_back_where_no_trial_that_can_pay_fits() -> None:
    plan = avx2_main_job(600.0)
    plan.floors["inductor"] = 10_000.0  # an earlier run's Inductor trial stopped after hours
    fit = plan.fitting(SPACE, BACKENDS, traffic=True)
    assert FULL_EAGER in fit and FULL_INDUCTOR not in fit
    assert not plan.may_start(BACKENDS, traffic=True)  # none of them could change the pick


def test_cannot_decide_only_below_the_least_budget_that_decides_and_it_names_it() -> None:
    """A budget that fits the baseline, Inductor's trial at its deciding rounds and the tail
    decides; below it, the plan says so and names that budget, rounded up to a minute."""
    short = avx2_main_job(240.0)
    line = plan_line(short, 8, BACKENDS, traffic=True)
    assert "cannot decide anything here" in line and "a trial of inductor needs" in line, line
    minutes = int(line.split("raise --time-budget to at least ")[1].rstrip("m"))
    assert minutes * 60 >= short.decides_at(BACKENDS) > 240.0
    enough = avx2_main_job(minutes * 60.0)
    assert enough.may_start(BACKENDS, traffic=True)
    assert "cannot decide" not in plan_line(enough, 8, BACKENDS, traffic=True)
    assert not avx2_main_job(minutes * 60.0 - 60.0).may_start(BACKENDS, traffic=True)


def test_the_confirmation_s_share_follows_the_candidates_that_need_it() -> None:
    plan = avx2_main_job(3600.0)
    slower, faster = measured(FULL_INDUCTOR, 12.0), measured(REGIONAL_INDUCTOR, 5.0)
    wrong = measured(Strategy.create("nested", "inductor"), 4.0, ok=False)  # fails the gate
    assert (needs_confirming(slower), needs_confirming(faster)) == (False, True)
    assert not needs_confirming(wrong)
    plan.learn_trial(slower.strategy, slower, 150.0)
    plan.learn_trial(wrong.strategy, wrong, 150.0)
    assert plan.confirmation_s(BACKENDS, traffic=True) == 0.0  # no faster: nothing kept
    plan.learn_trial(faster.strategy, faster, 150.0)
    one = plan.confirmation_s(BACKENDS, traffic=True)
    assert one > 0.0
    for _ in range(RIVALS + 1):
        other = measured(Strategy.create("full", "inductor", "max-autotune-no-cudagraphs"), 6.0)
        plan.learn_trial(other.strategy, other, 150.0)
    most = plan.confirmation_s(BACKENDS, traffic=True)
    assert most > one and plan.candidates == 2 + RIVALS + 1 - 1
    plan.candidates += 5
    assert plan.confirmation_s(BACKENDS, traffic=True) == most  # the pick and its rivals, no more


def test_an_eager_probe_runs_only_where_the_dear_trial_fits_after_it() -> None:
    roomy, tight = avx2_main_job(3600.0), avx2_main_job(400.0)
    assert roomy.probe_fits("inductor", BACKENDS, traffic=True)
    assert tight.may_start(BACKENDS, traffic=True)  # the dear trial fits alone...
    assert not tight.probe_fits("inductor", BACKENDS, traffic=True)  # ...not after a probe
    space = Space.default("cpu").narrow(backend="inductor,eager", dynamic="none")
    steered = sampler.Steered(sampler.base_sampler("tpe", 0, 8), space, 0)
    steered.plan(space.strategies())
    dear = space.params(FULL_INDUCTOR)
    assert steered.nearest(dear).backend == "eager"  # the cell's probe first, as before
    steered.probe_fits = lambda backend: False
    assert steered.nearest(dear).key == FULL_INDUCTOR.key


def test_a_pick_the_budget_left_unconfirmed_says_what_it_rests_on_and_stays() -> None:
    plan = avx2_main_job(600.0, spent_s=590.0)
    plan.candidates = 1
    why = short_to_confirm(plan, BACKENDS, traffic=True)
    assert why.startswith("the budget ended first (") and "a confirmation of the pick" in why
    assert short_to_confirm(avx2_main_job(3600.0), BACKENDS, traffic=True) == ""
    trial = measured(FULL_INDUCTOR, 5.0)
    trial.latency.samples_ms = [5.0, 5.0, 5.0, 11.0, 5.0, 5.0]  # type: ignore[union-attr]
    done = unconfirmed(FULL_INDUCTOR.key, trial, why)
    assert (done.pick, done.status) == (FULL_INDUCTOR.key, "unconfirmed")
    assert done.lines == [f"not confirmed: {why}", "the pick rests on its trial's 6 rounds: "
                          "it beat eager in 5 of 6 (p = 0.22, 2.00x)"]  # fmt: skip


def test_a_search_says_whether_it_spent_its_budget_or_ended_decided() -> None:
    plan = avx2_main_job(600.0)
    assert ending(plan, "time", 590.0, 8).startswith("budget: spent, 98% of the 10 min budget")
    assert ending(plan, "exhausted", 200.0, 8) == ("budget: decided at 33% of the 10 min budget: "
                                                  "every strategy of the space was measured or "
                                                  "ruled out")  # fmt: skip
    assert "the 8 trials asked for were measured" in ending(plan, "budget", 200.0, 8)
    plan.started = time.time() - 500.0
    hold(plan, BACKENDS, traffic=True)
    early = ending(plan, "time", 300.0, 8)
    assert "a trial of inductor that could change the pick needs about" in early, early
    assert ending(Plan(None), "time", 10.0, 8) == ""


def test_only_backends_that_can_pay_are_counted_as_paying() -> None:
    assert pays(FULL_INDUCTOR) and not pays(FULL_EAGER) and not pays(FULL_AOT)
    assert not pays(Strategy.create("none")) and deciding_rounds() == 6


@pytest.mark.slow
def test_a_short_budget_measures_inductor_first_and_picks_it(tmp_path: Path) -> None:
    """200 elementwise steps, which Inductor fuses into one loop (it wins every round), under
    75 s: the first compiled trial is Inductor's, it is picked, and the replaying backends
    come after it if at all. Before, the cheapest went first (full/eager), and the kept
    confirmation's share left no room for Inductor."""
    from autotune.storage import Store

    argv = [sys.executable, "-m", "autotune.cli", "search", "--model", "tests.models:chain",
            "--backend", "eager,aot_eager,inductor", "--granularity", "full", "--mode",
            "default", "--dynamic", "none", "--fullgraph", "false", "--trials", "3", "--iters",
            "100", "--warmup", "1", "--starts", "cold", "--time-budget", "75s", "--study", "pays",
            "--no-progress", "--json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    began = time.monotonic()
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    wall = time.monotonic() - began
    assert done.returncode == 0, done.stderr[-3000:]
    store = Store(f"sqlite:///{tmp_path}/studies/autotune.db")
    try:
        order = [r.key for r in sorted(store.measurements("pays"), key=lambda r: r.id)
                 if r.measured and r.key != "none"]  # fmt: skip
    finally:
        store.engine.dispose()
    assert order and order[0].startswith("full/inductor/"), (order, done.stderr[-2000:])
    answer = json.loads(done.stdout)
    assert answer["chosen"].startswith("full/inductor/"), (answer["chosen"], done.stderr)
    assert answer["ending"].startswith("budget: "), answer["ending"]
    assert wall <= 1.1 * 75 + 5, wall  # +5: python's start and torch's import


def test_a_confirmation_that_cannot_fit_what_is_left_leaves_it_to_the_trials() -> None:
    """A candidate's confirmation is kept its share only while that share fits what is left:
    past it no confirmation will run, so the trials take the time (before, the search stopped
    with a fifth of its budget unspent and the pick unconfirmed all the same)."""
    from autotune.search.plan import TAIL_S

    plan = avx2_main_job(520.0, spent_s=300.0)
    plan.candidates, plan.dearest = 1, 23.0
    keep = plan.confirmation_s(BACKENDS, traffic=True)
    left = plan.left_s()
    assert left is not None and keep > left and plan.deadline is not None, (keep, left)
    end = plan.trials_end(BACKENDS, traffic=True)
    assert end is not None and plan.deadline - end == pytest.approx(TAIL_S)  # not epoch-relative
    roomy = avx2_main_job(3600.0, spent_s=300.0)
    roomy.candidates, roomy.dearest = 1, 23.0
    end, keep = roomy.trials_end(BACKENDS, True), roomy.confirmation_s(BACKENDS, True)
    assert roomy.deadline is not None and end is not None
    assert roomy.deadline - end == pytest.approx(keep) and keep > TAIL_S


def measured_order(folder: Path, study: str) -> list[str]:
    """The compiled strategies a study measured, in the order it measured them."""
    from autotune.storage import Store

    store = Store(f"sqlite:///{folder}/studies/autotune.db")
    try:
        rows = sorted(store.measurements(study), key=lambda r: r.id)
        return [r.key for r in rows if r.measured and r.key != "none"]
    finally:
        store.engine.dispose()


@pytest.mark.slow
def test_the_same_command_does_the_same_work_and_a_rerun_goes_on_from_it(tmp_path: Path) -> None:
    """One command under a budget that cannot measure the whole space, run in two empty
    folders and then again in the first (its study continues, the baseline stored): both first
    runs measure Inductor first and then the same strategies in the same order, and the rerun
    goes on from where the first stopped, in that order, rather than starting over with the
    replaying backends (before, a first run that paid for its baseline measured nothing, and
    its rerun measured full/eager alone)."""
    argv = [sys.executable, "-m", "autotune.cli", "search", "--model", "tests.models:chain",
            "--backend", "eager,aot_eager,inductor", "--granularity", "full", "--mode",
            "default,max-autotune-no-cudagraphs", "--options", "freezing,cpp_wrapper",
            "--dynamic", "none,false", "--fullgraph", "false", "--trials", "40", "--iters", "100",
            "--warmup", "1", "--starts", "cold", "--time-budget", "90s", "--no-confirm",
            "--study", "same", "--no-progress"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    orders = []
    for folder in (tmp_path / "a", tmp_path / "b", tmp_path / "a"):
        folder.mkdir(exist_ok=True)
        before = measured_order(folder, "same") if (folder / "studies").exists() else []
        done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env,
                              timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        order = measured_order(folder, "same")
        assert order[: len(before)] == before  # nothing stored is measured again
        orders.append((order[len(before) :], done.stdout))
    (first, out), (again, _), (rerun, _) = orders
    assert first and first[0].startswith("full/inductor/"), out
    # the same order while both had room (the last of each met a budget whose room for one
    # more trial depends on how long the ones before took)
    common = min(len(first), len(again)) - 1
    assert common >= 1 and first[:common] == again[:common], (first, again)
    assert rerun, "the rerun measured nothing"
    assert not set(rerun) & set(first)
