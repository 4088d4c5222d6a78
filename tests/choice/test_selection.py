"""Selection: the policies on hand-built measurements (no database: selection is pure), the
Pareto front, and the sign test."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.choice.selection import candidates, pareto, pick, sign_test
from autotune.errors import AutotuneError
from autotune.trial.measurement import Latency, Measurement
from tests.helpers import S, hand_rows, point, stored


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("knee", "A"),  # normalised distances: none 1.0, A 0.39, B 1.0
        ("fastest", "B"),  # D is faster but gives wrong answers
        ("quickest", "A"),  # C compiles quicker but is slower than eager
        ("amortized:100", "none"),  # 1.0 s eager vs 1.5 s A vs 10.2 s B
        ("amortized:1000", "A"),  # 10 s vs 6 s vs 12 s
        ("amortized:10000", "B"),  # 100 s vs 51 s vs 30 s
        ("latency-budget:6", "A"),  # A and E qualify; A compiles quicker
        ("latency-budget:3", "B"),
        ("latency-budget:10", "none"),  # eager meets the budget: don't compile
    ],
)
def test_each_policy_picks_what_its_definition_says(policy: str, expected: str) -> None:
    assert pick(candidates(hand_rows()), policy).key == S[expected].key


def test_front_and_impossible_budget() -> None:
    points = candidates(hand_rows())
    assert S["D"].key not in {p.key for p in points}  # infeasible: never a candidate
    assert [p.key for p in pareto(points)] == [S["none"].key, S["A"].key, S["B"].key]
    with pytest.raises(AutotuneError, match="no strategy meets the latency budget of 1 ms"):
        pick(points, "latency-budget:1")


def test_quickest_falls_back_to_eager_when_nothing_beats_it() -> None:
    rows = [stored("none", 0, point(S["none"], 0.0, 10.0)),
            stored(S["C"].key, 1, point(S["C"], 0.5, 12.0))]  # fmt: skip
    assert pick(candidates(rows), "quickest").key == "none"


def test_a_speedup_the_rounds_do_not_show_is_no_speedup() -> None:
    """Median 8 ms vs eager 10 ms, but compiled won only 3 of 5 interleaved rounds."""
    assert sign_test([10.0] * 5, [8, 8, 8, 12, 12]) == 1.0
    assert sign_test([10.0] * 8, [9.0] * 8) == pytest.approx(2 / 256)
    rows = [stored("none", 0, point(S["none"], 0.0, 10.0))]
    noisy = Measurement.from_dict(point(S["A"], 1.0, 8.0))
    noisy.latency = Latency([], 0, 0, 0, [8, 8, 8, 12, 12])
    noisy.latency.median_ms = 8.0
    noisy.eager_latency = Latency([], 0, 0, 0, [10.0] * 5)
    rows.append(stored(S["A"].key, 1, noisy.to_dict()))
    points = {p.key: p for p in candidates(rows)}
    assert points[S["A"].key].latency_ms == 10.0 and not points[S["A"].key].significant
    assert points[S["A"].key].raw_latency_ms == 8.0
    assert [p.key for p in pareto(list(points.values()))] == ["none"]
    assert pick(list(points.values()), "knee").key == "none"  # the honest answer


def _with_warm(strategy, cold: float, warm: float, ms: float) -> dict:
    from autotune.trial.measurement import Start

    m = Measurement.from_dict(point(strategy, cold, ms))
    m.starts = {"cold": Start("cold", compile_s=cold), "warm": Start("warm", compile_s=warm)}
    return m.to_dict()


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # none 0 s + 10 ms a call; full 20 s cold, 2 s warm, 5 ms; regional 6 s, 5 s, 6 ms
        ("restarts:1:1000", "none"),  # 10 s vs full 25 s vs regional 12 s
        ("amortized:10000", "C"),  # one start of 10,000 calls: 100 vs 70 vs 66 s
        ("restarts:10:1000", "B"),  # 100 vs 20+9*2+50 = 88 vs 6+9*5+60 = 111 s
        ("restarts:100:1000", "B"),  # 1000 vs 718 vs 1101 s
    ],
)
def test_restarts_counts_one_cold_start_and_warm_restarts(policy: str, expected: str) -> None:
    """Counting every start cold (amortized) picks regional's quick compile; a service that
    restarts with its caches in place pays full's cold compile once and its 2 s warm start
    after, and picks full."""
    full, regional = S["B"], S["C"]  # full/inductor and a regional strategy
    rows = [stored("none", 0, point(S["none"], 0.0, 10.0)),
            stored(full.key, 1, _with_warm(full, 20.0, 2.0, 5.0)),
            stored(regional.key, 2, _with_warm(regional, 6.0, 5.0, 6.0))]  # fmt: skip
    chosen = pick(candidates(rows), policy)
    assert chosen.key == S[expected].key
    points = {p.key: p for p in candidates(rows)}
    assert points[full.key].total_s(1000, 10, "warm") == pytest.approx(88.0)


def test_restarts_count_the_start_the_objectives_name() -> None:
    """With --objectives precompiled,latency a restart is a precompiled start; a strategy that
    has none (regional here) counts a cold one; with compile,latency a restart is warm."""
    from autotune.trial.measurement import Start

    full, regional = S["B"], S["C"]
    m = Measurement.from_dict(point(full, 20.0, 5.0))
    m.starts = {"cold": Start("cold", compile_s=20.0), "warm": Start("warm", compile_s=10.0),
                "precompiled": Start("precompiled", compile_s=1.0, load_s=1.0)}  # fmt: skip
    rows = [stored("none", 0, point(S["none"], 0.0, 10.0)), stored(full.key, 1, m.to_dict()),
            stored(regional.key, 2, _with_warm(regional, 6.0, 5.0, 6.0))]  # fmt: skip
    # S=10, C=1000: none 100 s; full 20 + 9 x 1 + 50 = 79 s; regional 6 + 9 x 6 + 60 = 120 s
    shipped = pick(candidates(rows), "restarts:10:1000", ("precompiled", "latency"))
    assert shipped.key == full.key
    # warm restarts: none 100 s; full 20 + 9 x 10 + 50 = 160 s; regional 6 + 9 x 5 + 60 = 111 s
    assert pick(candidates(rows), "restarts:10:1000", ("compile", "latency")).key == "none"


def test_objectives_and_policies_that_make_no_sense_are_refused() -> None:
    from autotune.choice.objectives import check, parse_policy
    from autotune.errors import ConfigError

    check(("warm", "latency"), ("cold", "warm"))
    for bad in (("compile", "warm", "latency"), ("latency",), ("compile", "speed")):
        with pytest.raises(ConfigError, match="bad objectives"):
            check(bad, ("cold", "warm", "portable"))
    with pytest.raises(ConfigError, match="needs portable starts"):
        check(("portable", "latency"), ("cold", "warm"))
    assert parse_policy("restarts:50:1000") == ("restarts", (50.0, 1000.0))
    assert parse_policy("amortized:1e3") == ("amortized", (1000.0,))
    for bad in ("restarts:50", "restarts:0:10", "amortized:x", "amortized:nan", "amortized:inf",
                "restarts:nan:5", "restarts:1.5:10", "latency-budget:-1", 5):  # fmt: skip
        with pytest.raises(ConfigError, match="bad policy"):
            parse_policy(bad)


def test_tokens_per_s_in_a_front_are_on_the_baseline_s_scale_or_none() -> None:
    """The issue's table: eager's 129.8 tokens/s beside a trial's own 745.6 (its process ran
    faster). Now a trial's figure is the baseline's times the trial's ratio to its own eager,
    where its rounds showed a speedup; the baseline's where they did not; none without its
    eager's figure."""
    from autotune.choice.selection import Point

    base = Measurement.from_dict(point(S["none"], 0.0, 10.0))
    base.tokens_per_s = 129.8
    shown = Measurement.from_dict(point(S["A"], 1.0, 5.0))  # 2x, every round
    shown.tokens_per_s, shown.eager_tokens_per_s = 745.6, 570.0
    assert Point.of(shown, 1, base).tokens_per_s == pytest.approx(129.8 * 745.6 / 570.0)
    assert Point.of(base, None, base).tokens_per_s == 129.8
    level = Measurement.from_dict(point(S["A"], 1.0, 10.0))  # no speedup shown
    level.tokens_per_s, level.eager_tokens_per_s = 745.6, 700.0
    assert Point.of(level, 1, base).tokens_per_s == 129.8
    level.eager_tokens_per_s = None
    assert Point.of(level, 1, base).tokens_per_s is None


def _served(key: str, ms: float, goodput: float, eager_goodput: float) -> dict:
    """A continuous trial's stored record with an SLO: its median steady passes' goodput, the
    strategy's side and eager's (its other figures as :func:`tests.helpers.point`'s)."""
    from autotune.workload import Workload

    m = Measurement.from_dict(point(S[key], {"none": 0.0, "A": 1.0, "B": 10.0}[key], ms))
    w = Workload(kind="continuous", rate=5.0, seq_len="4..8", new_tokens="2..4", requests=4,
                 slo="ttft=500ms,tpot=50ms")  # fmt: skip
    m.workload = w
    steady = {"eager": {"goodput": eager_goodput, "ttft_p90_ms": 90.0},
              "compiled": {"goodput": goodput, "ttft_p90_ms": 80.0}}  # fmt: skip
    m.traffic = {"continuous": {"steady": steady, "first": steady, "requests": {}}}
    return m.to_dict()


def test_a_point_s_goodput_is_its_median_pass_s_and_eager_s_its_own() -> None:
    """The strategy's side of the stored median pass; eager's own pass for the eager point;
    none where the workload gave no SLO targets (all its requests would count)."""
    from autotune.choice.selection import Point

    payload = _served("A", 5.0, 3.5, 2.0)
    rows = [stored("none", 0, _served("none", 10.0, 2.5, 2.25)), stored(S["A"].key, 1, payload)]
    got = {p.key: p for p in candidates(rows)}
    assert got[S["A"].key].goodput == 3.5 and got["none"].goodput == 2.25
    assert got[S["A"].key].values(("compile", "goodput")) == (1.0, 3.5)
    assert got[S["A"].key].costs(("compile", "goodput")) == (1.0, -3.5)
    payload["workload"]["slo"] = ""
    assert Point.of(Measurement.from_dict(payload), 1, None).goodput is None


def test_a_goodput_study_keeps_the_higher_goodput_on_its_front(tmp_path: Path) -> None:
    """A real study (Optuna on SQLite, as a search opens it): B compiles longer than A and
    serves more requests within the SLO, so both are on the front; E compiles longer than A
    for less goodput: dominated, though its latency is the best. Optuna's own front agrees,
    the values it holds are goodput as measured (not negated), and the table says so."""
    from autotune.choice.selection import objective_values
    from autotune.cli.report import front_table
    from autotune.search.open import open_optuna
    from tests.helpers import fast_spec

    rows = {"none": _served("none", 10.0, 2.0, 2.0), "A": _served("A", 5.0, 3.0, 2.0),
            "B": _served("B", 6.0, 4.5, 2.0)}  # fmt: skip
    worse = Measurement.from_dict(_served("B", 1.0, 2.5, 2.0))
    worse.strategy, worse.compile_s = S["E"], 2.0
    rows["E"] = worse.to_dict()
    objectives = ("compile", "goodput")
    spec = fast_spec(workload="continuous", rate=5.0, slo="ttft=500ms",
                     objectives="compile,goodput")  # fmt: skip
    url = f"sqlite:///{tmp_path / 'g.db'}"
    study, _ = open_optuna(url, "goodput", spec, 0, 4)
    base = Measurement.from_dict(rows["none"])
    for name, payload in rows.items():
        trial = study.ask()
        trial.set_user_attr("key", S[name].key)
        study.tell(trial, objective_values(Measurement.from_dict(payload), objectives, base))
    optuna_front = {t.user_attrs["key"]: t.values for t in study.best_trials}
    assert optuna_front == {S["none"].key: [0.0, 2.0], S["A"].key: [1.0, 3.0],
                            S["B"].key: [10.0, 4.5]}  # fmt: skip
    points = candidates([stored(S[k].key, i, p) for i, (k, p) in enumerate(rows.items())])
    front = pareto(points, objectives)
    assert [p.key for p in front] == [S["none"].key, S["A"].key, S["B"].key]
    assert pick(points, "knee", objectives).key == S["A"].key
    assert pick(points, "fastest", objectives).key == S["E"].key  # latency: not an objective
    # over 100 requests: none 0 + 100 / 2 = 50 s, A 1 + 100 / 3 = 34.3 s, B 10 + 22.2 = 32.2 s
    assert pick(points, "amortized:100", objectives).key == S["B"].key
    assert pick(points, "amortized:10", objectives).key == S["A"].key  # 5 s, 4.3 s, 12.2 s
    table = front_table(front, S["A"].key)
    assert "goodput" in table and "4.50 req/s" in table and "-4.5" not in table
