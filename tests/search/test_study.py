"""The search: a real Optuna study over real trials, stored in a real SQLite file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest

from autotune.choice.selection import candidates, pareto
from autotune.search import Search, open_search, run
from autotune.search.deduction import Tactics
from autotune.trial.measurement import Measurement
from tests.helpers import fast_spec


def test_optuna_reads_the_study_and_agrees_on_the_front(toy_study: Search) -> None:
    study = optuna.load_study(study_name=toy_study.name, storage=toy_study.store.url)
    assert study.metric_names == ["compile_s", "latency_ms"]
    assert len([t for t in study.trials if "repeat_of" not in t.user_attrs]) >= 10
    optuna_front = {t.user_attrs["key"] for t in study.best_trials}
    ours = {p.key for p in pareto(candidates(toy_study.store.measurements(toy_study.name)))}
    assert optuna_front == ours and ours


def test_each_strategy_measured_once_and_repeats_recorded(toy_study: Search) -> None:
    rows = toy_study.store.measurements(toy_study.name)
    keys = [r.key for r in rows]
    assert len(keys) == len(set(keys)) == 10
    study = optuna.load_study(study_name=toy_study.name, storage=toy_study.store.url)
    for t in study.trials:
        if "repeat_of" in t.user_attrs:  # a repeat carries the measured trial's values
            first = study.trials[t.user_attrs["repeat_of"]]
            assert t.user_attrs["key"] == first.user_attrs["key"] and t.values == first.values


def test_search_and_studies_count_measured_alike(toy_study: Search, capsys) -> None:
    """One definition of "measured": what the search's outcome says, what `autotune studies`
    lists, and the budget of a study that stopped on it (the eager baseline counts when the
    space holds eager, as here)."""
    import json

    from autotune.cli import main

    assert main(["studies", "--storage", toy_study.store.url, "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert toy_study.outcome.stopped == "budget"  # type: ignore[attr-defined]
    assert row["measured"] == toy_study.outcome.measured == row["budget"] == 10  # type: ignore[attr-defined]
    assert row["live workers"] == 0


def test_baseline_is_measured_once_and_is_the_none_trial(toy_study: Search) -> None:
    row = toy_study.store.measurement(toy_study.name, "none")
    assert row is not None and row.trial_number == 0
    m = Measurement.from_dict(row.payload)
    assert m.ok and m.compile_s == 0.0 and m.latency and m.latency.samples_ms


def test_raw_samples_and_phases_are_stored(toy_study: Search) -> None:
    compiled = [
        Measurement.from_dict(r.payload)
        for r in toy_study.store.measurements(toy_study.name)
        if r.key != "none" and r.status == "ok"
    ]
    assert compiled
    assert all(len(m.latency.samples_ms) == 3 for m in compiled if m.latency)
    assert all(m.phases.get("total_s", 0) > 0 for m in compiled)


def test_grid_enumerates_each_strategy_once_and_ends_exhausted(in_tmp: Path) -> None:
    spec = fast_spec(
        sampler="grid", granularity="none,full", backend="eager", dynamic="none,false",
        fullgraph="false", trials=50,
    )  # fmt: skip
    search = open_search(spec, None)
    outcome = run(search)
    assert outcome.stopped == "exhausted"
    assert {r.key for r in search.store.measurements(search.name)} == {
        "none",
        "full/eager/-/dynamic=auto/breaks-ok",
        "full/eager/-/dynamic=false/breaks-ok",
    }
    assert outcome.repeats == 0 and Path("studies/autotune.db").is_file()


def test_failing_trial_does_not_stop_the_study(in_tmp: Path) -> None:
    spec = fast_spec(
        model="tests.models:graph_break", layers=None, sampler="grid", granularity="full",
        backend="eager", dynamic="none", fullgraph="true,false",
    )  # fmt: skip
    search = open_search(spec, None)
    search.tactics = Tactics(anchors=False)  # else breaks-ok, an anchor, goes first
    assert run(search).stopped == "exhausted"
    study = optuna.load_study(study_name=search.name, storage=search.store.url)
    states = {t.user_attrs["key"]: t for t in study.trials}
    failed = states["full/eager/-/dynamic=auto/fullgraph"]
    assert failed.state == optuna.trial.TrialState.FAIL and "graph" in failed.user_attrs["reason"]
    ran = states["full/eager/-/dynamic=auto/breaks-ok"]  # the study went on after the failure
    assert ran.state.name == "COMPLETE" and ran.number > failed.number
    rows = {r.key: r.status for r in search.store.measurements(search.name)}
    assert rows == {"none": "ok", failed.user_attrs["key"]: "failed", ran.user_attrs["key"]: "ok"}


def test_resume_continues_where_it_stopped(in_tmp: Path) -> None:
    first = open_search(fast_spec(trials=3), None)
    run(first)
    before = {r.key: r.id for r in first.store.measurements(first.name)}
    assert len(before) == 3
    again = open_search(fast_spec(trials=5), None)
    assert again.name == first.name
    run(again)
    after = {r.key: r.id for r in again.store.measurements(again.name)}
    assert len(after) == 5 and all(after[k] == v for k, v in before.items())


def _start_slow_search(*extra: str) -> subprocess.Popen:
    """A search whose compiled trial never finishes (its backend sleeps), SIGINT enabled."""
    root = str(Path(__file__).resolve().parents[2])
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "search", "--model", "tests.models:tiny_toy",
         "--backend", "tests.models:slow_backend", "--granularity", "none,full",
         "--dynamic", "none", "--fullgraph", "false", "--iters", "2", "--no-progress", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": root},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even under nohup
    )  # fmt: skip


def _running_child(proc: subprocess.Popen, db: Path) -> int:
    """Wait until the baseline is stored and a compiled trial's child runs; return its pid."""
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(0.5)
        found = [
            c.pid for c in psutil.Process(proc.pid).children(recursive=True)
            if c.name() == "autotune-trial"
        ]  # fmt: skip
        if found and db.is_file():
            study = optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
            if any(t.user_attrs.get("key") == "none" and t.state.name == "COMPLETE"
                   for t in study.trials):  # fmt: skip
                return int(found[0])
    raise AssertionError("the search never reached its compiled trial")


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie (dead, waiting for whoever adopted it to reap it),
    within 30 s (a loaded machine is slow to deliver the parent-death signal)."""
    for _ in range(300):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_term_stops_cleanly_and_keeps_what_was_measured(in_tmp: Path, sig) -> None:
    db = Path("studies/autotune.db")
    proc = _start_slow_search()
    try:
        child = _running_child(proc, db)
        time.sleep(1)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "interrupted" in err and "Traceback" not in err
    assert _gone(child), "the trial's child outlived the search"
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
    assert not [t for t in study.trials if t.state.name == "RUNNING"]
    assert any(
        t.user_attrs.get("key") == "none" and t.state.name == "COMPLETE" for t in study.trials
    )


@pytest.mark.slow
def test_a_killed_search_takes_its_child_along(in_tmp: Path) -> None:
    proc = _start_slow_search()
    try:
        child = _running_child(proc, Path("studies/autotune.db"))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert _gone(child), "a SIGKILLed search left its trial's child running"


@pytest.mark.parametrize(("max_memory", "feasible"), [(1.0, False), (10_000_000.0, True)])
def test_memory_limit_makes_trials_infeasible(in_tmp: Path, max_memory: float, feasible: bool):
    """Both sides of the gate: a 1 MiB limit makes every trial that ran infeasible (Optuna has
    no best trial); a limit above every peak leaves them feasible."""
    spec = fast_spec(
        sampler="grid", granularity="none,full", backend="eager", dynamic="none",
        fullgraph="false", max_memory=max_memory, study=f"mem-{feasible}",
    )  # fmt: skip
    search = open_search(spec, None)
    run(search)
    study = optuna.load_study(study_name=search.name, storage=search.store.url)
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert done, "no trial ran: the gate was never tested"
    assert all((t.constraints["memory"] <= 0) == feasible for t in done)
    assert bool(study.best_trials) == feasible


@pytest.mark.slow
def test_ctrl_c_during_the_baseline_leaves_no_live_worker(in_tmp: Path) -> None:
    """The baseline's claim is given back on an interrupt: ``autotune studies`` does not show
    a live worker for the grace period after."""
    from autotune.coordination import Coordinator
    from autotune.storage import Store

    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "search", "--model", "tests.models:sleeping",
         "--backend", "eager", "--granularity", "none,full", "--dynamic", "none",
         "--fullgraph", "false", "--no-progress", "--study", "asleep"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": root},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    db = "sqlite:///studies/autotune.db"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # until the baseline is claimed and being measured
            time.sleep(0.3)
            if Path("studies/autotune.db").is_file() and Store(db).claims("asleep"):
                break
        else:
            raise AssertionError("the baseline was never claimed")
        assert Coordinator(Store(db), "asleep", "").live_workers() == 1
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err
    assert Coordinator(Store(db), "asleep", "").live_workers() == 0
    assert Store(db).measurements("asleep") == []  # nothing half-measured was stored


def test_an_objective_adds_the_start_it_needs(in_tmp, capsys) -> None:
    """--objectives aot,latency with --starts cold: the user said what to measure, so the aot
    start is added, said in one line; a bad objective is still refused in one line."""
    import pytest

    from autotune.cli import main
    from autotune.errors import AutotuneWarning

    with pytest.warns(AutotuneWarning, match="--starts is now cold,aot"):
        spec = fast_spec(objectives="aot,latency", starts="cold")
    assert spec.settings.starts == ("cold", "aot")
    with pytest.warns(AutotuneWarning, match="--starts is now cold,warm,portable"):
        assert fast_spec(objectives="portable,latency", starts="cold,warm").settings.starts == (
            "cold", "warm", "portable")  # fmt: skip
    assert fast_spec(objectives="warm,latency").settings.starts == ("cold", "warm", "portable")
    code = main(["search", "--model", "toy-64", "--objectives", "hot,latency", "--trials", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "bad objectives 'hot,latency'" in err and err.count("\n") == 1


@pytest.mark.slow
def test_a_config_that_recompiles_while_serving_is_found_and_beaten_by_one_that_does_not(
    tmp_path: Path,
) -> None:
    """A continuous search over two configs of one compile (each compile 0.5 s dearer, by
    tests.models:stalling_backend): no padding, where batches of new shapes compile after the
    warm-up, and every batch padded to the warm-up's own shape (q=64 with batches of at most
    64 tokens, kv past the cache), where none do. The search finds the first one's stalls and
    ranks the second above it, over a lifetime short enough (ten requests) that what they cost
    is their compiles: over a long one, the order is their latencies', which a loaded machine's
    noise may swap (CI read both not shown faster than eager, and the padded one slower)."""
    import autotune

    stalling = "tests.models:stalling_backend"
    ragged, padded = "q=1+kv=16", "q=64+kv=16384+tokens=64"
    argv = [sys.executable, "-m", "autotune.cli", "search", "--model",
            "tests.models:dawdling_llama", "--workload", "continuous", "--rate", "40",
            "--seq-len", "4..40", "--new-tokens", "2..8", "--requests", "8", "--granularity",
            "none,full", "--backend", stalling,
            "--allow-code", stalling, "--dynamic", "false", "--fullgraph", "false",
            "--batching", f"{ragged},{padded}", "--iters", "6", "--warmup", "1", "--starts",
            "cold", "--no-confirm", "--no-progress", "--study", "pads", "--policy", "amortized:10",
            "--storage", f"sqlite:///{tmp_path / 'a.db'}"]  # fmt: skip
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root, "TEST_COMPILE_STALL_S": "0.5"}
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = {m.strategy.batching: m for m in autotune.load_study(
        "pads", f"sqlite:///{tmp_path / 'a.db'}").measurements() if m.ok}  # fmt: skip
    stalls = found[ragged].traffic["continuous"]["stalls_s"]
    assert found[ragged].traffic["continuous"]["graphs"] >= 8 and len(stalls) >= 8
    assert sum(stalls) >= 8 * 0.5  # each compile after the warm-up, a stall
    assert found[padded].traffic["continuous"]["graphs"] == 0
    assert found[padded].traffic["continuous"]["stalls_s"] == []
    # the padded config beats the ragged one: eager, which compiles nothing, is the pick over
    # ten requests, and the padded config its runner-up
    assert found[ragged].compile_s > found[padded].compile_s + 8 * 0.5
    assert "chosen (amortized:10): none" in done.stdout, done.stdout
    assert f"less than the runner-up, {found[padded].strategy.key};" in done.stdout, done.stdout


def test_a_trial_a_peer_failed_while_its_worker_was_away_is_dropped_not_a_crash(
    in_tmp: Path,
) -> None:
    """A worker asks for a trial, is cut off past the grace period, and a peer fails that trial
    as a silent worker's (CI's 15 s outage: the worker then crashed on Optuna's
    UpdateFinishedTrialError while writing its parameters). The worker drops the trial, asks
    again and goes on; the failed trial holds nothing of it."""
    search = open_search(fast_spec(trials=2), None)
    peer = optuna.load_study(study_name=search.optuna.study_name, storage=search.store.url)
    asked = search.optuna.ask

    def ask_then_failed_by_a_peer() -> optuna.trial.Trial:
        trial = asked()
        if trial.number == 1:  # the first trial after the baseline: as the outage met it
            peer.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        return trial

    search.optuna.ask = ask_then_failed_by_a_peer  # type: ignore[method-assign]
    run(search)
    trials = search.optuna.get_trials(deepcopy=False)
    assert trials[1].state == optuna.trial.TrialState.FAIL and trials[1].params == {}
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) >= 2  # the baseline and a trial asked again
