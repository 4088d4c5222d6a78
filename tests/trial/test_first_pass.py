"""A traffic's first pass (autotune/trial/scenarios/first_pass.py). An eager baseline keeps the
time budget: where playing every shape would run past its share, it plays a sample that keeps
the traffic's mix, estimates the rest at their size, and says what the whole would take, which
the plan then counts for every compiled trial. A compiled trial counts what a server would meet:
a shape that a later dynamic graph took over is played again, its recording a stall, and the
probe is timed on the device's clock."""

from __future__ import annotations

import time

import pytest

from autotune import ModelRef, Strategy, Workload, device, measure
from autotune.search.plan import FIRST_PASS_CALLS, Plan
from autotune.trial.scenarios import TrafficTrial
from autotune.workload import Settings
from tests.helpers import traffic_trial
from tests.models import RECORD_S

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


QUICK = Settings(iters=2, warmup=1, starts=("cold",), timeout_s=300)


def served(workload: Workload, strategy: Strategy) -> TrafficTrial:
    """A traffic's trial run in this process, so that a test can watch it."""
    return traffic_trial(LLAMA, workload, strategy, QUICK)


@pytest.mark.slow
def test_a_shape_a_later_dynamic_graph_took_over_is_played_again_where_it_records() -> None:
    """Length 8 compiles a static graph and records it at its repeat; length 16 compiles a
    dynamic one, which Dynamo then looks up first, so request 3 (length 8 again) runs the
    dynamic graph: a warm-up and a recording at 8 that a server meets there, and the first
    pass counted none of it (its stalls one short, the recording in the warm-up rounds). The
    backend records as CUDA-graph trees do, at a graph's second call at each set of sizes."""
    requests = ((1, 8), (1, 16), (1, 8), (1, 8))
    recording = Strategy.create("full", "tests.models:recording_backend")
    t = served(Workload(traffic=requests), recording).ctx.result.traffic
    # 1: its repeat's recording; 2: the probe's (it arrives once); 3: the dynamic graph's at 8
    assert t["recorded"] == [1, 1, 1, 0] and t["stalls"] == 3 and t["compiles"] == [1, 1, 0, 0]
    assert t["stall_ms"][2] >= RECORD_S * 1e3 - t["eager_first_ms"][2] and t["stall_ms"][3] == 0
    assert t["first_ms"][3] < RECORD_S * 1e3  # request 4 stands at a call that recorded nothing
    assert t["moved"] == [3]


def test_the_probe_is_timed_on_the_device_s_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile or a recording in the probe is a stall, its time read after a synchronise
    (device.wall): perf_counter alone read a GPU's queued work as done."""
    inside, probed = [False], []
    wall, probe = device.wall, TrafficTrial.ran_eager

    def watched(fn, where):  # type: ignore[no-untyped-def]
        inside[0] = True
        try:
            return wall(fn, where)
        finally:
            inside[0] = False

    def ran_eager(self, shape):  # type: ignore[no-untyped-def]
        probed.append(inside[0])
        return probe(self, shape)

    monkeypatch.setattr(device, "wall", watched)
    monkeypatch.setattr(TrafficTrial, "ran_eager", ran_eager)
    served(Workload(traffic=((1, 8), (1, 16))), Strategy.create("full", "eager"))
    assert probed == [True, True]
