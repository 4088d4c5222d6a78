"""The budget holds whatever the model: a trial whose compile overruns its plan is stopped where
going on would break the time budget, stored as nothing (a later run with more time measures
it), and the search answers within its budget (autotune/trial/process.py, search/step.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.catalog import ModelRef
from autotune.search.plan import Plan
from autotune.strategy import Strategy
from autotune.trial.parent import run_trial
from autotune.trial.reference import make
from autotune.workload import Settings, Workload
from tests.search.test_plan import baseline

ROOT = Path(__file__).resolve().parents[2]
STALLING = "tests.models:stalling_backend"


@pytest.mark.slow
def test_a_trial_past_its_stop_is_stopped_with_where_it_had_got_to() -> None:
    """A compile of an hour, told to stop 12 s from now: stopped then, not at its timeout
    (1,200 s), saying it was compiling; one that ends before its stop is measured."""
    strategy = Strategy.create("full", STALLING)
    ref, workload = ModelRef("toy-64", layers=1), Workload()
    settings = Settings(iters=3, warmup=1, starts=("cold",))
    reference = make(ref, workload, settings)  # as a search has it before its trials
    settings = dataclasses.replace(settings, stop_at=time.time() + 12.0)  # past its build
    began = time.monotonic()
    m = run_trial(ref, workload, strategy, settings, reference)
    assert m.status == "stopped" and time.monotonic() - began < 60, (m.status, m.reason)
    assert "stopped at the time budget after" in m.reason and "while compiling" in m.reason
    quick = Strategy.create("full", "eager")
    later = dataclasses.replace(settings, stop_at=time.time() + 120)
    done = run_trial(ref, workload, quick, later, reference)
    assert done.ok, done.reason


def test_a_trial_stops_where_the_confirmation_s_share_begins_and_counts_at_once() -> None:
    plan = Plan(120.0, iters=20)
    plan.learn_baseline(baseline(5.0, 20, child_s=3.0))
    cut = plan.for_trial(Settings(iters=20), ["inductor"], False, 1)
    assert cut.stop_at == pytest.approx(plan.trials_end(["inductor"], False), abs=1.0)
    assert cut.deadline <= cut.stop_at + 0.01 and cut.stop_at < plan.deadline  # the answer
    # keeps its tail; a candidate to confirm, its share
    plan.candidates = 1
    kept = plan.for_trial(Settings(iters=20), ["inductor"], False, 1)
    assert kept.stop_at < cut.stop_at - 1.0
    plan.candidates = 0
    assert plan.for_confirmation(Settings()).stop_at < plan.deadline  # so does the answer
    before = plan.compile_s("inductor")
    from autotune.trial.measurement import Measurement

    stopped = Measurement({}, {}, {}, "stopped", reason="stopped at the time budget after 300 s")
    plan.learn_trial(Strategy.create("full", "inductor"), stopped, 300.0)
    assert plan.compile_s("inductor") > 2 * before  # the overrun, at once, not the prior
    assert plan.split(400.0)["stopped at the budget"] == 300.0  # where its time went
    assert plan.candidates == 0 and plan.paid  # nothing measured to confirm; Inductor tried
    # the sampler and the surrogate choose among what fits: the stopped backend no longer
    roomy = Plan(1200.0, iters=20)
    roomy.learn_baseline(baseline(5.0, 20, child_s=3.0))
    full, quick = Strategy.create("full", "inductor"), Strategy.create("full", "eager")
    both = ["inductor", "eager"]
    assert roomy.fitting([full, quick], both, False) == [full]  # what can pay first
    roomy.started -= 900.0  # the stopped trial ran 900 s of the 1200
    roomy.learn_trial(full, stopped, 900.0)
    assert roomy.fitting([full, quick], both, False) == [quick]  # tried: the rest may follow
    later = Plan(600.0, iters=20, floors={"inductor": 300.0})  # a later run of the study
    later.learn_baseline(baseline(5.0, 20, child_s=3.0))
    assert later.compile_s("inductor") > 250  # not the 40 s prior: it ran 300 s and was cut
    assert later.compile_s("aot_eager") == 4.0  # another backend keeps its prior
    measured = baseline(5.0, 20, child_s=3.0)
    later.learn_trial(Strategy.create("full", "inductor"), measured, 20.0)
    assert later.compile_s("inductor") < 250  # measured here: what it took


def test_a_budget_below_the_eager_baseline_answers_eager_at_once(in_tmp, capsys) -> None:
    """One second: less than the eager baseline alone takes. The search says that nothing
    can be decided, answers eager, and ends; it neither hangs nor runs a trial."""
    from autotune.cli import main

    began = time.monotonic()
    code = main(["search", "--model", "toy-64", "--layers", "1", "--backend", "eager",
                 "--granularity", "full", "--trials", "2", "--iters", "5", "--starts", "cold",
                 "--time-budget", "1s", "--no-progress"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "cannot decide anything here" in err and "raise --time-budget" in err, err
    assert "chosen (amortized:1h): none" in out and "0 strategies measured" in out, out
    assert time.monotonic() - began < 60


def search(
    folder: Path, budget: str, stall_s: float, *more: str
) -> tuple[subprocess.CompletedProcess, float]:
    """``autotune search`` of toy-64 with the stalling backend, one strategy a backend (a
    sampler's pick among more would make what is measured a draw)."""
    argv = [sys.executable, "-m", "autotune.cli", "search", "--model", "toy-64", "--layers", "1",
            "--backend", STALLING, "--allow-code", STALLING, "--granularity", "full",
            "--fullgraph", "false", "--dynamic", "none", "--trials", "1", "--iters", "10",
            "--warmup", "1",
            "--starts", "cold", "--time-budget", budget, "--study", "stalls",
            "--no-progress", *more]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TEST_COMPILE_STALL_S": f"{stall_s:g}"}
    began = time.monotonic()
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env, timeout=240)
    return done, time.monotonic() - began


@pytest.mark.long
def test_a_compile_dearer_than_the_budget_is_stopped_and_measured_by_a_later_run(
    tmp_path: Path,
) -> None:
    """A compile of an hour under a 2-minute budget: the search ends within 10 % of it, with
    an answer (eager, nothing else measured) and a line naming the stopped strategy; the same
    study run again with a compile of 1 s measures it."""
    done, wall = search(tmp_path, "2m", 3600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert wall <= 1.1 * 120, wall
    out = done.stdout
    assert "stopped at the time budget: full/tests.models:stalling_backend" in out, out
    assert "while compiling" in out and "chosen (amortized:1h): none" in out, out
    best = json.loads((tmp_path / "studies" / "stalls" / "best.json").read_text())
    assert best["autotune"]["key"] == "none"
    again, _ = search(tmp_path, "3m", 1)
    assert again.returncode == 0, again.stderr[-3000:]
    compiling = re.search(r"\((\d+) s of it compiling\)", again.stderr)
    assert compiling and int(compiling[1]) > 60, again.stderr  # the stop, not the 40 s prior
    assert "stopped at the time budget" not in again.stdout
    assert "1 strategies measured in this study" in again.stdout, again.stdout


@pytest.mark.long
def test_workers_stop_their_trial_at_the_budget_and_leave_the_study_consistent(
    tmp_path: Path,
) -> None:
    """Two local workers (a plan each, its clock from its join): the stalling trial is stopped
    where the confirmation's share begins, its Optuna trial failed with why, no claim and no
    running trial left behind, and the summary names it and the workers' share of the time."""
    import optuna

    from autotune.storage import Store

    more = ["--workers", "2", "--backend", f"{STALLING},eager", "--trials", "2"]  # both
    done, wall = search(tmp_path, "90s", 3600, *more)  # each worker's plan keeps the
    # confirmation's share (its prior: half a cold compile, 20 s) from its own 90 s
    assert done.returncode == 0, done.stderr[-3000:]
    assert wall < 150, wall  # not the hour the compile would take, nor its 1,200 s timeout
    assert "stopped at the time budget: full/tests.models:stalling_backend" in done.stdout
    assert "worker processes" in done.stdout, done.stdout
    store = Store(f"sqlite:///{tmp_path}/studies/autotune.db")
    try:
        claims = store.claims("stalls")
        assert all(c.heartbeat is None for c in claims)  # none in flight, none to be reaped
        assert not any(c.key.startswith("full/tests.models:stalling") for c in claims)  # freed
        assert "full/tests.models:stalling_backend" not in " ".join(store.measured_keys("stalls"))
    finally:
        store.engine.dispose()
    study = optuna.load_study(
        study_name="stalls", storage=f"sqlite:///{tmp_path}/studies/autotune.db"
    )
    states = [t.state for t in study.trials]
    assert optuna.trial.TrialState.RUNNING not in states
    assert any("stopped" in t.user_attrs for t in study.trials)


def test_a_worker_keeps_its_budget_by_the_plan_open_search_built(tmp_path: Path) -> None:
    """A worker joins a submitted study of 1 s: open_search built its plan, its clock started
    as it joined; the baseline's worker learns it into that plan and computes no reference (no
    trial fits: it would judge nothing); the worker stops by its plan (``time``), nothing but
    the baseline measured. Before, a worker had no plan: a raw clock, the reference regardless."""
    from autotune.search import join, run, submit
    from tests.helpers import fast_spec

    url = f"sqlite:///{tmp_path}/w.db"
    submit(fast_spec(trials=2, time_budget="1s", study="w"), url)
    joined = time.time()
    search = join("w", url)
    assert isinstance(search.plan, Plan) and search.plan.budget_s == 1.0
    assert joined <= search.plan.started <= time.time()
    outcome = run(search)
    assert outcome.stopped == "time" and outcome.measured_here == 0, outcome
    assert search.plan.round_s is not None  # the baseline, learned
    assert search.store.reference("w") is None
    assert search.store.measured_keys("w") == {"none"}
