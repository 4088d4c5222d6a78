"""A continuous study's pick beside transformers' presets (autotune/choice/presets.py): each
level's lifetime cost as measured, or why it has none, and the pick against the best."""

from __future__ import annotations

from autotune.choice import presets
from autotune.choice.selection import Point
from autotune.strategy import Strategy


def _point(s: Strategy, compile_s: float, latency_ms: float) -> Point:
    return Point(s.key, s.to_dict(), compile_s, latency_ms, None, 1.0, 0, per="request")


EAGER = Strategy.create("none")
LEVEL1 = Strategy.create(batching="level=1")
LEVEL2 = Strategy.create(batching="level=2")
PICK = Strategy.create(backend="aot_eager", batching="q=64+kv=64")


def test_the_pick_is_set_beside_each_preset_over_its_lifetime() -> None:
    points = [_point(EAGER, 0.0, 20.0), _point(LEVEL1, 40.0, 15.0), _point(PICK, 5.0, 10.0)]
    statuses = [(p.strategy, "ok") for p in points] + [(LEVEL2.to_dict(), "failed")]
    line = presets.line(points[2], points, statuses, "amortized:1000")
    # 1000 requests: eager 0 + 20 s, level 1 40 + 15 s, the pick 5 + 10 s
    assert "level 0 (eager) 20.0 s" in line and "level 1 55.0 s" in line
    assert "level 2 failed" in line and "level 3 not measured" in line
    assert "the pick 15.0 s, 5.0 s less than the best preset, level 0" in line
    assert "over 1,000 requests" in line


def test_a_goodput_study_prices_each_preset_as_its_policy_does() -> None:
    import dataclasses

    points = [
        dataclasses.replace(_point(EAGER, 0.0, 20.0), goodput=50.0),
        dataclasses.replace(_point(LEVEL1, 40.0, 15.0), goodput=0.0),
    ]  # met no SLO
    line = presets.line(points[0], points, [], "amortized:1000", good=True)
    # 1000 requests at 1 / goodput s each: eager 0 + 20 s; level 1 never meets its targets
    assert "level 0 (eager) 20.0 s" in line and "level 1 met the SLO on no request" in line
    assert line.endswith("the pick is the best preset")
    by_latency = presets.line(points[0], points, [], "amortized:1000")
    assert "level 1 55.0 s" in by_latency  # a latency study's: 40 + 1000 x 15 ms


def test_a_preset_picked_says_so_and_a_study_without_presets_says_nothing() -> None:
    points = [_point(EAGER, 0.0, 20.0), _point(LEVEL1, 1.0, 5.0)]
    line = presets.line(points[1], points, [], "amortized:1000")
    assert line.endswith("the pick is the best preset")
    assert presets.line(points[1], [_point(PICK, 1.0, 5.0)], [], "amortized:10") == ""


def test_a_preset_stopped_at_the_time_budget_says_so_not_merely_not_measured() -> None:
    # gemma-2b --layers 2 over a 10-minute budget: level 1's warm-up (8,192 tokens) and rounds
    # ran 477 s and were stopped; levels 2 and 3 never started
    points = [_point(EAGER, 0.0, 20.0)]
    statuses = [(EAGER.to_dict(), "ok")]
    line = presets.line(points[0], points, statuses, "amortized:1000",
                        stopped=[(LEVEL1.to_dict(), 477.4)])  # fmt: skip
    assert "level 1 stopped at the time budget after 477 s" in line
    assert "level 2 not measured" in line and "level 3 not measured" in line
    assert line.endswith("the pick is the best preset")


def test_a_preset_the_budget_never_started_says_why() -> None:
    from autotune.cli.summary import UNSTARTED

    points = [_point(EAGER, 0.0, 20.0), _point(LEVEL1, 40.0, 15.0)]
    statuses = [(p.strategy, "ok") for p in points] + [(LEVEL2.to_dict(), UNSTARTED)]
    line = presets.line(points[0], points, statuses, "amortized:1000")
    assert f"level 2 {UNSTARTED};" in line and "level 3 not measured;" in line


def test_the_search_summary_says_which_preset_the_budget_stopped_and_which_it_never_started() -> (
    None
):
    from types import SimpleNamespace as NS

    from autotune.cli.summary import Finished

    points = [_point(EAGER, 0.0, 20.0)]
    row = NS(key=EAGER.key, status="ok", payload={"strategy": EAGER.to_dict()})
    finished = NS(
        spec=NS(workload=NS(kind="continuous"), policy="amortized:1000",
                objectives=("compile", "ttft")),
        tuned=NS(chosen=points[0]), told=NS(points=points), rows=[row],
        search=NS(members=[EAGER, LEVEL1, LEVEL2, PICK]),
        cut=[NS(key=LEVEL1.key, seconds=477.4)], outcome=NS(stopped="time"),
    )  # fmt: skip
    (line,) = Finished.presets(finished)  # type: ignore[arg-type]
    assert "level 1 stopped at the time budget after 477 s;" in line
    assert "level 2 not measured: the time budget fit no trial of it;" in line
    assert "level 3 not measured;" in line  # not in this space: no trial of it was ever due
