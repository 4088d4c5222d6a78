"""The surrogate (autotune.search.surrogate): what the measured strategies predict about the
others, shared across cells; and the anchors the search starts from (autotune.search.deduction)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.choice.selection import Point
from autotune.search import deduction, open_search, surrogate
from autotune.strategy import Strategy
from autotune.strategy.space import Space
from tests.helpers import fast_spec

S = Strategy.create
CPP = ("cpp_wrapper",)
SPREAD = deduction.Tactics().spread  # the search's own prior spreads


def test_hypervolume_is_the_area_and_volume_dominated() -> None:
    # two points: [0,2]x[1,2] and [1,2]x[0,2], overlapping in [1,2]x[1,2]
    assert surrogate.hypervolume([(0, 1), (1, 0)], (2, 2)) == pytest.approx(3.0)
    assert surrogate.hypervolume([(0, 1), (1, 0), (1, 1)], (2, 2)) == pytest.approx(3.0)
    assert surrogate.hypervolume([(0, 0, 0)], (1, 2, 3)) == pytest.approx(6.0)
    assert surrogate.hypervolume([(0, 0, 0), (0.5, 0.5, -1)], (1, 2, 3)) == pytest.approx(6.75)
    assert surrogate.hypervolume([(3, 0)], (2, 2)) == 0.0  # outside the box


def _front(cpp_gain: float) -> dict[Strategy, tuple[float, float]]:
    """Measured (compile s, latency ms): cpp_wrapper divides full Inductor's latency by
    ``cpp_gain``; regional Inductor compiles in half the time, as fast."""
    return {
        S("none"): (0.0, 10.0),
        S("full", "eager"): (1.0, 9.5),
        S("full"): (10.0, 6.0),
        S("full", options=CPP): (11.0, 6.0 / cpp_gain),
        S("regional"): (5.0, 6.0),
    }


FREE = [S("regional", "eager"), S("regional", options=CPP), S("nested", "eager"),
        S("nested"), S("nested", options=CPP)]  # fmt: skip


def test_an_option_s_gain_at_one_granularity_is_expected_at_another() -> None:
    assert surrogate.propose(_front(2.0), [], FREE, SPREAD) == S("regional", options=CPP)
    # the other side: where cpp_wrapper gained nothing at full, regional+cpp_wrapper is
    # expected to be regional again (dominated), and something unknown is tried instead
    picked = surrogate.propose(_front(1.0), [], FREE, SPREAD)
    assert picked is not None and picked != S("regional", options=CPP)


def test_a_speedup_its_rounds_do_not_show_is_still_evidence_of_its_factors() -> None:
    # cpp_wrapper at full measured twice as fast, but its rounds did not show it: the front
    # counts eager's latency there (10 ms); fitted so, cpp_wrapper would seem to do nothing
    values = {**_front(2.0), S("full", options=CPP): (11.0, 10.0)}
    evidence = {S("full", options=CPP): (11.0, 3.0)}
    free = [S("regional", options=CPP), S("nested", options=CPP), S("nested")]
    assert surrogate.propose(values, [], free, SPREAD) == S("nested")  # cpp_wrapper: no use
    assert surrogate.propose(values, [], free, SPREAD, evidence) == S("regional", options=CPP)


def test_the_evidence_is_the_speedup_as_measured_where_the_front_counts_none() -> None:
    def point(s: Strategy, latency_ms: float, speedup: float, shown: bool) -> Point:
        return Point(s.key, s.to_dict(), 10.0, latency_ms, None, speedup, None,
                     significant=shown)  # fmt: skip

    points = [point(S("none"), 10.0, 1.0, False), point(S("full"), 10.0, 2.0, False),
              point(S("regional"), 4.0, 2.5, True)]  # fmt: skip
    assert surrogate.as_measured(points, ("compile", "latency")) == {S("full"): (10.0, 5.0)}
    assert surrogate.as_measured(points[1:], ("compile", "latency")) == {}  # no eager: none


def test_failures_are_expected_where_they_happened_and_not_elsewhere() -> None:
    tried = [
        (S("full", options=CPP), False),
        (S("nested"), False),
        (S("nested", options=CPP, dynamic=False), True),
        (S("nested", options=CPP, dynamic=True), True),
    ]
    chance = {g: surrogate.failure_chance(S(g, options=CPP), tried)
              for g in ("full", "regional", "nested")}  # fmt: skip
    # where cpp_wrapper ran < where it was never tried < where it failed twice
    assert chance["full"] < chance["regional"] - 0.1 < chance["nested"] - 0.2
    assert chance["nested"] > 0.6
    assert surrogate.failure_chance(S("nested"), tried) < 0.3  # it ran without the option
    # and the pick steers clear of it: nested+cpp_wrapper failed everywhere it was tried
    failed = [S("nested", options=CPP, dynamic=False), S("nested", options=CPP, dynamic=True)]
    free = [S("nested", options=CPP), S("regional", options=CPP)]
    values = {**_front(2.0), S("nested"): (4.0, 6.0)}  # nested compiles quickest
    assert surrogate.propose(values, [], free, SPREAD) == S("nested", options=CPP)  # unaware
    assert surrogate.propose(values, failed, free, SPREAD) == S("regional", options=CPP)


def test_nothing_to_gain_or_nothing_free_is_no_pick() -> None:
    assert surrogate.propose(_front(2.0), [], [], SPREAD) is None
    assert surrogate.propose({}, [], FREE, SPREAD) is None


def test_the_anchors_are_one_each_and_then_done() -> None:
    members = Space.default("cpu").narrow(backend="inductor,eager", dynamic="none,false",
                                          fullgraph="false").validate("cpu")  # fmt: skip
    first = deduction.anchors(members, members)
    dearest = first[5]
    assert [a.key for a in first[:5]] == [S(*g).key for g in (
        ("none",), ("full", "eager"), ("full",), ("regional",), ("nested",))]  # fmt: skip
    assert (dearest.granularity, dearest.backend) == ("full", "inductor") and dearest.options
    # then full Inductor at its defaults with each option alone
    options = {o for s in members for o in s.options}
    alone = {S("full", options=(o,)).key for o in options} & {s.key for s in members}
    assert {a.key for a in first[6:]} == alone and len(first) == 6 + len(alone) >= 8
    # once they are measured, no other full Inductor strategy becomes an anchor
    left = [s for s in members if s not in first]
    assert deduction.anchors(left, members) == []
    assert deduction.anchors([*left, dearest], members) == [dearest]


def test_each_option_alone_is_an_anchor_so_that_the_dearest_s_gain_is_told_apart() -> None:
    members = Space.default("cpu").narrow(granularity="full", backend="inductor",
                                          mode="default,max-autotune-no-cudagraphs",
                                          options="freezing,cpp_wrapper", dynamic="none",
                                          fullgraph="false").validate("cpu")  # fmt: skip
    keys = [a.key for a in deduction.anchors(members, members)]
    dearest = S("full", mode="max-autotune-no-cudagraphs", options=("freezing", "cpp_wrapper"))
    assert keys == [S("full").key, dearest.key, S("full", options=("freezing",)).key,
                    S("full", options=("cpp_wrapper",)).key]  # fmt: skip


@pytest.mark.parametrize(("sampler", "model"), [(None, True), ("surrogate", True), ("tpe", False),
                                                ("random", False)])  # fmt: skip
def test_the_surrogate_picks_unless_another_sampler_is_named(
    in_tmp: Path, sampler: str | None, model: bool
) -> None:
    over = {"sampler": sampler} if sampler else {}
    search = open_search(fast_spec(trials=3, **over), f"sqlite:///{in_tmp}/s.db")
    assert search.spec.sampler == (sampler or "surrogate")
    assert search.tactics.model is model
    assert search.tactics.anchors  # the anchors come first with any sampler
