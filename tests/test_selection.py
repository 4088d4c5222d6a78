"""Selection: the policies on a hand-built study, the Pareto front, and the sign test."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import AutotuneError
from autotune.measurement import Latency, Measurement
from autotune.selection import candidates, pareto, pick, sign_test
from autotune.store import Store
from tests.conftest import S, hand_built, point


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
def test_each_policy_picks_what_its_definition_says(tmp_path: Path, policy: str, expected: str):
    store = hand_built(tmp_path)
    assert pick(candidates(store, "hand"), policy).key == S[expected].key


def test_front_and_impossible_budget(tmp_path: Path) -> None:
    points = candidates(hand_built(tmp_path), "hand")
    assert S["D"].key not in {p.key for p in points}  # infeasible: never a candidate
    assert [p.key for p in pareto(points)] == [S["none"].key, S["A"].key, S["B"].key]
    with pytest.raises(AutotuneError, match="no strategy meets the latency budget of 1 ms"):
        pick(points, "latency-budget:1")


def test_quickest_falls_back_to_eager_when_nothing_beats_it(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/slow.db")
    store.add_study("slow", {}, {})
    store.add_measurement("slow", "none", 0, point(S["none"], 0.0, 10.0))
    store.add_measurement("slow", S["C"].key, 1, point(S["C"], 0.5, 12.0))
    assert pick(candidates(store, "slow"), "quickest").key == "none"


def test_a_speedup_the_rounds_do_not_show_is_no_speedup(tmp_path: Path) -> None:
    """Median 8 ms vs eager 10 ms, but compiled won only 3 of 5 interleaved rounds."""
    assert sign_test([10.0] * 5, [8, 8, 8, 12, 12]) == 1.0
    assert sign_test([10.0] * 8, [9.0] * 8) == pytest.approx(2 / 256)
    store = Store(f"sqlite:///{tmp_path}/ns.db")
    store.add_study("ns", {}, {})
    store.add_measurement("ns", "none", 0, point(S["none"], 0.0, 10.0))
    noisy = Measurement.from_dict(point(S["A"], 1.0, 8.0))
    noisy.latency = Latency([], 0, 0, 0, [8, 8, 8, 12, 12])
    noisy.latency.median_ms = 8.0
    noisy.eager_latency = Latency([], 0, 0, 0, [10.0] * 5)
    store.add_measurement("ns", S["A"].key, 1, noisy.to_dict())
    points = {p.key: p for p in candidates(store, "ns")}
    assert points[S["A"].key].latency_ms == 10.0 and not points[S["A"].key].significant
    assert points[S["A"].key].raw_latency_ms == 8.0
    assert [p.key for p in pareto(list(points.values()))] == ["none"]
    assert pick(list(points.values()), "knee").key == "none"  # the honest answer
