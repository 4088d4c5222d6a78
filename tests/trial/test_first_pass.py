"""An eager baseline's first pass over a traffic keeps the time budget
(autotune/trial/scenarios/first_pass.py): where playing every shape would run past its share,
it plays a sample that keeps the traffic's mix, estimates the rest at their size, and says what
the whole would take, which the plan then counts for every compiled trial."""

from __future__ import annotations

import time

import pytest

from autotune import ModelRef, Strategy, Workload, measure
from autotune.search.plan import FIRST_PASS_CALLS, Plan
from autotune.workload import Settings

TRAFFIC = Workload(seq_len="8,12,16,20,24,28,32,36,40,44,48,52", requests=12)
LLAMA = ModelRef("tests.models:tiny_llama")
SHAPES = list(dict.fromkeys(TRAFFIC.traffic))  # the distinct shapes, by first arrival


def baseline(first_by: float) -> object:
    m = measure(LLAMA, TRAFFIC, Strategy.create("none"),
                Settings(iters=3, warmup=1, first_by=first_by, least=3))  # fmt: skip
    assert m.ok, m.reason
    return m


def test_a_baseline_past_its_share_plays_a_sample_and_projects_the_whole() -> None:
    """A share already spent: the first request plays, the other shapes are estimated at
    their size (every request still has eager's milliseconds); the projection is the whole
    pass at the played rate, more than the one request took."""
    m = baseline(time.time())
    t = m.traffic  # type: ignore[attr-defined]
    sampled = t["sampled"]
    n = len(SHAPES)
    assert n >= 6 and (sampled["timed"], sampled["shapes"], sampled["estimated"]) == (1, n, n - 1)
    assert t["played"] == [1] and len(t["eager_first_ms"]) == len(TRAFFIC.traffic)
    first_ms, (_, seq) = t["eager_first_ms"][0], SHAPES[0]
    assert sampled["projected_s"] > first_ms / 1e3
    # the estimates scale with the tokens, from the one shape played (whose later arrivals
    # stand at its repeat call)
    for (_, other), ms in zip(TRAFFIC.traffic, t["eager_first_ms"], strict=True):
        assert other == seq or ms == pytest.approx(first_ms * other / seq)


def test_a_baseline_with_room_plays_every_shape_and_says_nothing() -> None:
    roomy = baseline(time.time() + 600.0)
    free = baseline(0.0)
    for m in (roomy, free):
        t = m.traffic  # type: ignore[attr-defined]
        assert "sampled" not in t and len(t["played"]) == len(SHAPES)


def test_the_plan_counts_the_whole_first_pass_of_a_sampled_baseline() -> None:
    """A compiled trial plays every shape: its estimate counts the shapes the baseline left
    out (their estimated milliseconds) at a compiled trial's three calls, beside what the
    baseline's first pass took."""
    m = baseline(time.time())
    estimated_s = m.traffic["sampled"]["estimated_s"]  # type: ignore[attr-defined]
    assert estimated_s > 0.0
    sampled = Plan(600.0, iters=6)
    sampled.learn_baseline(m)  # type: ignore[arg-type]
    m.traffic.pop("sampled")  # type: ignore[attr-defined]
    played = Plan(600.0, iters=6)
    played.learn_baseline(m)  # type: ignore[arg-type]
    assert sampled.fixed_s is not None and played.fixed_s is not None
    more = sampled.fixed_s - played.fixed_s
    assert more == pytest.approx(FIRST_PASS_CALLS * estimated_s)
