"""Many workers, one study, through a real PostgreSQL server."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.storage import Store
from tests.postgres import PASSWORD

ROOT = str(Path(__file__).resolve().parents[2])
SPEC = """
[model]
name = "tests.models:slow_toy"
[workload]
device = "cpu"
[space]
granularity = ["none", "full", "regional", "nested"]
backend = ["eager", "aot_eager"]
dynamic = ["none", false]
fullgraph = [false]
[search]
trials = {trials}
iters = 10
warmup = 1
timeout = 120
study = "{study}"
"""


def _submit(tmp: Path, url: str, study: str, trials: int, spec: str | None = None) -> None:
    """Submit a study: SPEC with its budget and name, or the given spec file's text. Through the
    library, in this process: the workers are what these tests start; `autotune submit` is run
    as a command in tests/service and tests/cli."""
    from autotune.search import submit
    from autotune.search.spec import StudySpec

    (tmp / "s.toml").write_text(spec or SPEC.format(trials=trials, study=study))
    submit(StudySpec.from_sources(str(tmp / "s.toml")), url)


def _worker(tmp: Path, url: str, study: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "AUTOTUNE_STORAGE": url, "PYTHONPATH": ROOT}
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "worker", "--study", study, "--no-progress",
         "--allow-code", "tests.models", *extra], cwd=tmp, env=env, stdout=subprocess.PIPE,
         stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _measured_once(url: str, study: str) -> collections.Counter:
    """How often each strategy is a trial's own measurement (repeats and skips left out)."""
    s = optuna.load_study(study_name=study, storage=url)
    measured = [
        t.user_attrs["key"] for t in s.trials
        if t.state.name in ("COMPLETE", "FAIL") and "key" in t.user_attrs
        and "repeat_of" not in t.user_attrs and "skipped" not in t.user_attrs
    ]  # fmt: skip
    return collections.Counter(measured)


def _consistent(url: str, study: str, budget: int, returning: int = 0) -> None:
    """What a fault must never break: the budget measured (plus at most one measurement per
    worker that came back after being presumed dead: it is kept, never lost), each strategy
    stored once, every stored measurement one COMPLETE trial's (or FAIL's, for a failed one),
    nothing left RUNNING."""
    rows = Store(url).measurements(study)
    assert budget <= len(rows) <= budget + returning, (len(rows), budget, returning)
    assert len({r.key for r in rows}) == len(rows)
    s = optuna.load_study(study_name=study, storage=url)
    assert not [t.number for t in s.trials if t.state.name == "RUNNING"]
    for r in rows:
        assert r.trial_number is not None, f"{r.key} is no trial's"
        t = s.trials[r.trial_number]
        assert t.user_attrs.get("key") == r.key and "repeat_of" not in t.user_attrs
        assert t.state.name == ("COMPLETE" if r.status == "ok" else "FAIL"), (r.key, t.state)
    assert max(_measured_once(url, study).values()) == 1


@pytest.mark.slow
@pytest.mark.waits
def test_three_concurrent_workers_measure_each_strategy_once(postgres, tmp_path: Path) -> None:
    url = postgres.url
    _submit(tmp_path, url, "three", 8)
    workers = [_worker(tmp_path, url, "three") for _ in range(3)]
    outs = [w.communicate(timeout=600) for w in workers]
    for w, (out, err) in zip(workers, outs, strict=True):
        assert w.returncode == 0, err[-2000:]
        assert "rror" not in err and PASSWORD not in out + err
    store = Store(url)
    rows = store.measurements("three")
    assert len(rows) == 8  # the study's count equals its budget
    assert len({r.key for r in rows}) == 8
    assert {c.key for c in store.claims("three")} == {r.key for r in rows}
    counts = _measured_once(url, "three")
    assert counts and max(counts.values()) == 1  # no strategy measured twice
    assert len({r.payload["environment"]["cpu"] for r in rows}) == 1
    workers_seen = {r.worker for r in store.claims("three") if r.key != "none"}
    assert len(workers_seen) >= 2  # the work was shared


def test_joining_a_missing_study_is_one_line(postgres, tmp_path: Path) -> None:
    out = _worker(tmp_path, postgres.url, "no-such-study").communicate(timeout=120)
    assert "no study named 'no-such-study'" in out[1] and out[1].count("\n") == 1
    assert PASSWORD not in out[1]


SLOW = """
[model]
name = "tests.models:tiny_toy"
[workload]
device = "cpu"
[space]
granularity = ["none", "full"]
backend = ["tests.models:slow_backend", "eager"]
dynamic = ["none"]
fullgraph = [false]
[search]
sampler = "grid"
trials = 3
iters = 3
warmup = 1
timeout = 15
study = "killed"
"""


@pytest.mark.slow
@pytest.mark.waits
def test_a_killed_worker_s_strategy_is_measured_by_another(
    postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    import psutil

    url = postgres.url
    _submit(tmp_path, url, "", 0, SLOW)
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "1")  # the workers' (a 4 s grace period)
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "4")
    doomed = _worker(tmp_path, url, "killed")
    slow_key = "full/tests.models:slow_backend/-/dynamic=auto/breaks-ok"
    deadline = time.time() + 300
    while time.time() < deadline:  # until it is measuring the strategy that never ends
        time.sleep(0.5)
        claims = {c.key: c for c in Store(url).claims("killed")}
        if slow_key in claims and Store(url).measurement("killed", "none"):
            break
    else:
        raise AssertionError("the first worker never reached the slow strategy")
    time.sleep(2)
    from autotune.coordination import Coordinator

    assert Coordinator(Store(url), "killed", "").live_workers() == 1
    children = psutil.Process(doomed.pid).children(recursive=True)
    doomed.kill()  # SIGKILL, mid-trial
    doomed.wait()
    killed_trial = claims[slow_key].trial_number
    rescuer = _worker(tmp_path, url, "killed")
    _, err = rescuer.communicate(timeout=300)
    assert rescuer.returncode == 0, err[-2000:]
    assert all(not c.is_running() or c.status() == "zombie" for c in children)
    store = Store(url)
    rows = {r.key: r for r in store.measurements("killed")}
    assert set(rows) == {"none", slow_key, "full/eager/-/dynamic=auto/breaks-ok"}
    assert rows[slow_key].status == "timeout" and rows[slow_key].trial_number != killed_trial
    study = optuna.load_study(study_name="killed", storage=url)
    assert study.trials[killed_trial].state.name == "FAIL"  # through the heartbeat
    assert not [t for t in study.trials if t.state.name == "RUNNING"]
    assert max(_measured_once(url, "killed").values()) == 1


@pytest.mark.slow
@pytest.mark.waits
@pytest.mark.parametrize(
    ("grace_s", "outage_s"),
    [
        pytest.param(5, 15, id="15s-outage-5s-grace"),
        pytest.param(None, 60, marks=pytest.mark.long, id="60s-outage-default-30s-grace"),
    ],
)
def test_three_workers_outlast_a_database_outage_longer_than_the_grace_period(
    postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grace_s: int | None,
    outage_s: int,
) -> None:  # fmt: skip
    """An outage of two grace periods or more (15 s against a 5 s grace; on the long line, 60 s
    against the default 30 s): every claim looks silent when the server is back, and no worker may
    reap a live peer for it."""
    import time

    from autotune import variables

    for name in ("AUTOTUNE_GRACE_S", "AUTOTUNE_HEARTBEAT_S"):
        monkeypatch.delenv(name, raising=False)
    if grace_s is not None:  # the workers' grace period, and a heartbeat well inside it
        monkeypatch.setenv("AUTOTUNE_GRACE_S", str(grace_s))
        monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "1")
    grace = variables.grace_s()  # as the workers read it
    assert 2 * grace <= outage_s < variables.db_retry_s()  # past the grace, within the retries
    url, study = postgres.url, f"outage-{outage_s}s"  # one server: each outage a study
    _submit(
        tmp_path,
        url,
        "",
        0,
        SPEC.format(trials=10, study=study).replace("iters = 10", "iters = 30"),
    )
    workers = [_worker(tmp_path, url, study) for _ in range(3)]
    deadline = time.time() + 180
    while len(Store(url).measurements(study)) < 3 and time.time() < deadline:
        time.sleep(0.5)
    postgres.pg_ctl("stop", "-m", "fast")  # every connection drops
    time.sleep(outage_s)
    postgres.pg_ctl("start")
    outs = [w.communicate(timeout=600) for w in workers]
    errs = "".join(err for _, err in outs)
    (tmp_path / "errs.txt").write_text(errs)  # for a failure's post-mortem
    assert all(w.returncode == 0 for w in workers), errs[-3000:]
    assert "unreachable" in errs and "retrying" in errs  # the retry path was taken
    assert "Traceback" not in errs and PASSWORD not in errs
    assert "failed by another worker" not in errs  # nobody was reaped for the outage
    _consistent(url, study, 10)


FROZEN = """
[model]
name = "tests.models:tiny_toy"
[workload]
device = "cpu"
[space]
granularity = ["none", "full", "regional", "nested"]
backend = ["tests.models:sleepy_backend"]
dynamic = ["none", false]
fullgraph = [false]
[search]
trials = 6
iters = 3
warmup = 1
timeout = 60
study = "frozen"
"""


@pytest.mark.slow
@pytest.mark.waits
def test_a_worker_frozen_past_the_grace_period(
    postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGSTOP a worker with its trial child for 5 grace periods: its peer fails its trial
    and goes on; when it comes back, its measurement is kept (told in a new trial) unless the
    peer has one, nothing is measured twice and nobody crashes."""
    import signal
    import time

    import psutil

    url = postgres.url
    _submit(tmp_path, url, "", 0, FROZEN)
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "1")  # the workers' (a 6 s grace period)
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "6")
    frozen, peer = _worker(tmp_path, url, "frozen"), _worker(tmp_path, url, "frozen")
    deadline, tag = time.time() + 300, f":{frozen.pid}:"
    while time.time() < deadline:  # until the first worker is mid-trial (each is slow)
        time.sleep(0.2)
        busy = [c for c in Store(url).claims("frozen") if tag in c.worker
                and c.heartbeat is not None and "sleepy" in c.key]  # fmt: skip
        if busy:
            break
    else:
        raise AssertionError("the worker never started a slow trial")
    group = [psutil.Process(frozen.pid), *psutil.Process(frozen.pid).children(True)]
    for p in group:
        p.send_signal(signal.SIGSTOP)
    time.sleep(30)  # 5 grace periods: the peer's own slow trial ends and it reaps, even on
    # a loaded machine (at 2.5 its trial could outlast the freeze, and nobody was reaped)
    for p in group:
        p.send_signal(signal.SIGCONT)
    outs = [w.communicate(timeout=300) for w in (frozen, peer)]
    errs = "".join(err for _, err in outs)
    assert frozen.returncode == 0 and peer.returncode == 0, errs[-3000:]
    assert "Traceback" not in errs and "IntegrityError" not in errs
    assert ("failed by another worker" in outs[0][1]) or ("copy is dropped" in outs[0][1])
    _consistent(url, "frozen", 6, returning=1)
    study = optuna.load_study(study_name="frozen", storage=url)
    assert study.trials[busy[0].trial_number].state.name == "FAIL"  # reaped by the peer


@pytest.mark.slow
@pytest.mark.waits
def test_search_with_two_local_workers_on_sqlite(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("AUTOTUNE_STORAGE", None)
    out = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "search", "--model", "toy-64", "--layers", "4",
         "--backend", "eager,aot_eager", "--granularity", "none,full,regional", "--dynamic",
         "none", "--fullgraph", "false", "--iters", "3", "--workers", "2", "--no-progress",
         "--study", "two"], capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "share its cores" in out.stderr  # the CPU warning
    assert "locked" not in out.stderr and "Traceback" not in out.stderr
    store = Store(f"sqlite:///{tmp_path}/studies/autotune.db")
    rows = store.measurements("two")
    assert len(rows) == 5 and len({r.key for r in rows}) == 5
    assert len({c.worker for c in store.claims("two") if c.key != "none"}) == 2
    assert (tmp_path / "studies" / "two" / "best.json").is_file()


@pytest.mark.slow
@pytest.mark.waits
def test_a_worker_on_other_hardware_refuses_unless_forced(postgres, tmp_path: Path) -> None:
    import sqlalchemy

    url = postgres.url
    _submit(tmp_path, url, "elsewhere", 2)
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as c:  # as if the first worker had been an H100 machine
        c.execute(sqlalchemy.text(
            "UPDATE autotune_studies SET environment = :e WHERE name = 'elsewhere'"),
            {"e": json.dumps({"torch": "2.13.0", "cuda": "12.8", "device": "cuda",
                              "device_name": "NVIDIA H100 80GB HBM3"})},
        )  # fmt: skip
    _, err = _worker(tmp_path, url, "elsewhere").communicate(timeout=120)
    assert "this machine differs from the study's" in err and "--force" in err
    assert err.count("\n") == 1 and Store(url).measurements("elsewhere") == []
    forced = _worker(tmp_path, url, "elsewhere", "--force")
    _, err = forced.communicate(timeout=300)
    assert forced.returncode == 0, err[-2000:]
    assert len(Store(url).measurements("elsewhere")) == 2


@pytest.mark.slow
@pytest.mark.waits
def test_a_killed_single_search_resumes_on_sqlite(tmp_path: Path) -> None:
    import time

    argv = [sys.executable, "-m", "autotune.cli", "search", "--model", "tests.models:slow_toy",
            "--backend", "eager,aot_eager", "--granularity", "none,full,regional,nested",
            "--dynamic", "none,false", "--fullgraph", "false", "--iters", "20", "--trials",
            "7", "--no-progress", "--study", "resume"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": ROOT, "AUTOTUNE_HEARTBEAT_S": "1",
           "AUTOTUNE_GRACE_S": "3"}  # fmt: skip
    env.pop("AUTOTUNE_STORAGE", None)
    first = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    db = f"sqlite:///{tmp_path}/studies/autotune.db"
    deadline = time.time() + 180
    while time.time() < deadline:
        time.sleep(0.3)
        if (tmp_path / "studies" / "autotune.db").exists():
            claims, rows = Store(db).claims("resume"), Store(db).measurements("resume")
            if len(rows) >= 3 and len(claims) > len(rows):  # mid-trial
                break
    else:
        raise AssertionError("the search never reached the middle of a trial")
    first.kill()  # kill -9, mid-study
    first.wait()
    before = {r.key: r.id for r in Store(db).measurements("resume")}
    again = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    after = {r.key: r.id for r in Store(db).measurements("resume")}
    assert len(after) == 7 and all(after[k] == v for k, v in before.items())
    study = optuna.load_study(study_name="resume", storage=db)
    assert not [t for t in study.trials if t.state.name == "RUNNING"]


def test_a_tell_whose_answer_was_lost_is_not_taken_for_a_reaper_s(tmp_path: Path) -> None:
    """A tell that landed, its answer lost to a dropped connection, is retried and finds the
    trial ended: COMPLETE is this worker's own (a reaper only fails), so the measurement
    stays its trial's; a trial a reaper failed is not."""
    from autotune.choice.selection import objective_values
    from autotune.search import open_search, step
    from autotune.trial.measurement import Measurement
    from tests.helpers import S, fast_spec, point

    search = open_search(fast_spec(trials=4), f"sqlite:///{tmp_path}/t.db")
    search.baseline = Measurement.from_dict(point(S["none"], 0.0, 10.0))
    m = Measurement.from_dict(point(S["A"], 1.0, 5.0))
    landed = search.optuna.ask()
    search.optuna.tell(landed, objective_values(m, search.spec.objectives, search.baseline))
    assert step.tell(search, landed, m, None) is True  # the retry finds its own tell
    reaped = search.optuna.ask()
    search.optuna.tell(reaped, state=optuna.trial.TrialState.FAIL)  # as a reaper does
    assert step.tell(search, reaped, m, None) is False
    fresh = search.optuna.ask()
    assert step.tell(search, fresh, m, None) is True
    states = [t.state.name for t in search.optuna.get_trials(deepcopy=False)]
    assert states == ["COMPLETE", "FAIL", "COMPLETE"]


def test_a_trial_that_loses_an_adoption_repeats_the_winner_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers' trials both propose the eager baseline, stored with no trial: the one that
    loses the adoption is told as a repeat of the winner's trial, so the strategy is measured
    once (told as the row it read, it counted as a second measurement: seen with three workers
    on PostgreSQL)."""
    from autotune.search import open_search, step
    from autotune.trial.measurement import Measurement
    from tests.helpers import S, fast_spec, point

    search = open_search(fast_spec(trials=4), f"sqlite:///{tmp_path}/t.db")
    m = Measurement.from_dict(point(S["none"], 0.0, 10.0))
    search.baseline = m
    assert search.coord.record("none", None, m.to_dict()) == "stored"  # as the baseline is
    read, won = search.store.measurement, []

    def peer_adopts_after_the_read(name: str, key: str):  # the race's window, made certain
        row = read(name, key)
        if not won:
            won.append(search.optuna.ask())
            assert step.reuse(search, won[0], "none") == "adopted"
        return row

    loser = search.optuna.ask()
    monkeypatch.setattr(search.store, "measurement", peer_adopts_after_the_read)
    assert step.reuse(search, loser, "none") == "repeat"
    trials = {t.number: t for t in search.optuna.get_trials(deepcopy=False)}
    assert "repeat_of" not in trials[won[0].number].user_attrs
    assert trials[loser.number].user_attrs["repeat_of"] == won[0].number
    assert read(search.name, "none").trial_number == won[0].number
