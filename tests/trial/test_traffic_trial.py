"""A traffic's trial measured as a server meets it (autotune/trial/scenarios/traffic_trial.py):
a first pass over first arrivals, time to ready as eager's plus the stalls, no probe in a timed
call, every compiled graph judged, and a confirmation that measures what the trial measured."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from autotune import device, traffic
from autotune.catalog import ModelRef
from autotune.choice.confirm import settle
from autotune.choice.selection import candidates
from autotune.strategy import Strategy
from autotune.trial import recompiles
from autotune.trial.child import fulfil
from autotune.trial.measurement import Measurement
from autotune.trial.parent import confirm, measure
from autotune.trial.request import Request
from autotune.trial.scenarios import TrafficTrial, judged
from autotune.trial.scenarios.judged import judged_outputs
from autotune.workload import Settings, Workload
from tests import models
from tests.helpers import point, stored, traffic_trial

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ModelRef("tests.models:tiny_llama")
LENGTHS = "8,12,16,20,24,28,32,40,48,56,64,72"  # 12 lengths: past a static compile's limit (8)
QUICK = Settings(iters=4, warmup=1, starts=("cold",), timeout_s=300)
pytestmark = pytest.mark.xdist_group("served")  # its fixture runs once, beside traffic's


def served(workload: Workload, strategy: Strategy) -> TrafficTrial:
    """A traffic's scenario, run in this process (so that a test can watch it)."""
    return traffic_trial(LLAMA, workload, strategy, QUICK)


@pytest.mark.slow
def test_a_first_pass_plays_each_shape_once_and_ready_is_eager_plus_the_stalls() -> None:
    few = Workload(seq_len="8,16,24,32", requests=8)
    many = Workload(traffic=few.traffic * 600)  # 4,800 requests of the same shapes
    auto = Strategy.create("full", "aot_eager")
    short, long = measure(LLAMA, few, auto, QUICK), measure(LLAMA, many, auto, QUICK)
    assert short.ok and long.ok, (short.reason, long.reason)
    for m in (short, long):
        t = m.traffic
        shapes = len(set(m.workload.traffic))
        assert len(t["played"]) == shapes  # first arrivals only: repeats change nothing
        assert len(t["first_ms"]) == t["requests"]
        assert all(s == 0 for s, c in zip(t["stall_ms"], t["compiles"], strict=True) if not c)
        assert t["ready_s"] == pytest.approx(t["eager_ready_s"] + sum(t["stall_ms"]) / 1e3)
        assert m.compile_s == pytest.approx(sum(t["stall_ms"]) / 1e3)
    # the same first arrivals: the first pass of 4,800 requests costs what 8's did, at most 2x
    assert long.traffic["played"] == short.traffic["played"]
    assert long.timings["first_s"] < 2 * short.timings["first_s"] + 1.0, (
        long.timings, short.timings)  # fmt: skip


@pytest.mark.slow
def test_eager_on_recompile_is_judged_on_its_one_compiled_graph() -> None:
    guarded = Strategy.create("full", "aot_eager", dynamic=False, stance="eager_on_recompile")
    m = measure(LLAMA, Workload(seq_len=LENGTHS, requests=24), guarded, QUICK)
    assert m.ok and m.accuracy.passed, m.accuracy
    assert "1 of 1 graphs judged" in m.accuracy.detail, m.accuracy.detail
    eager_weight = sum(r["weight"] for r in m.traffic["steady"] if r["ran_eager"])
    share = len(m.traffic["ran_eager"]) / m.traffic["requests"]
    assert abs(eager_weight - share) <= 1 / traffic.STEADY_SHAPES  # the traffic's mix kept


def test_timed_calls_carry_no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every timed call of the first pass runs without a profiler; the probes run apart."""
    profiled, probes = [], []
    real_wall, real_probe = device.wall, recompiles.eager_blocks

    def wall(fn, where):  # type: ignore[no-untyped-def]
        profiled.append(sys.getprofile() is not None)
        return real_wall(fn, where)

    def probe(blocks):  # type: ignore[no-untyped-def]
        probes.append(len(blocks))
        return real_probe(blocks)

    monkeypatch.setattr(device, "wall", wall)
    monkeypatch.setattr(recompiles, "eager_blocks", probe)
    guarded = Strategy.create("full", "aot_eager", dynamic=False, stance="eager_on_recompile")
    scenario = served(Workload(seq_len="8,12,16,20", requests=8), guarded)
    assert profiled and not any(profiled) and probes
    assert scenario.eager_shapes  # the probes found the shapes served eager


@pytest.mark.slow
def test_a_shape_that_arrives_once_is_timed_once_on_each_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The first pass times a shape's repeat latency only where a later arrival stands at it:
    (1, 8) arrives twice, so each side times it twice; (1, 16) and (1, 24) once each. (1, 16)
    compiles a dynamic graph, which (1, 8)'s second arrival then runs: played again there, a
    call watched for its graph and one its later arrivals stand at."""
    calls: list[object] = []
    real_wall = device.wall

    def wall(fn, where):  # type: ignore[no-untyped-def]
        calls.append(fn)
        return real_wall(fn, where)

    monkeypatch.setattr(device, "wall", wall)
    requests = ((1, 8), (1, 16), (1, 8), (1, 24))
    scenario = served(Workload(traffic=requests), Strategy.create("full", "aot_eager"))
    timed = {(side, shape): calls.count(step) for side, steps in scenario.steps.items()
             for shape, step in steps.items() if shape in requests}  # fmt: skip
    assert timed == {("eager", (1, 8)): 2, ("eager", (1, 16)): 1, ("eager", (1, 24)): 1,
                     ("compiled", (1, 8)): 2 + 2, ("compiled", (1, 16)): 1,
                     ("compiled", (1, 24)): 1}  # fmt: skip
    t = scenario.ctx.result.traffic
    assert t["played"] == [1, 2, 4] and len(t["first_ms"]) == 4  # the repeat at its latency
    assert t["moved"] == [3] and t["stall_ms"][2] == 0  # nothing records on a CPU
    assert t["eager_first_ms"][2] > 0 and t["first_ms"][2] > 0


def test_a_model_without_repeated_blocks_is_found_running_eager() -> None:
    mixer = ModelRef("tests.models:mixing")
    assert recompiles.blocks_of(models.mixing()[0]) == []
    guarded = Strategy.create("full", "aot_eager", dynamic=False, stance="eager_on_recompile")
    w = Workload(seq_len="8,12,16,20", requests=8)
    m = measure(mixer, w, guarded, QUICK)
    assert m.ok, m.reason
    assert set(m.traffic["ran_eager"]) == {n for n, s in enumerate(w.traffic, 1)
                                           if s != w.traffic[0]}  # fmt: skip
    auto = measure(mixer, w, Strategy.create("full", "aot_eager"), QUICK)
    assert auto.ok and auto.traffic["ran_eager"] == []  # a dynamic graph serves them all


COUNT_80 = """
import torch
from autotune.trial import metrics
before = metrics.compile_counts()
double = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
with torch._dynamo.config.patch(recompile_limit=200, accumulated_recompile_limit=1000):
    for n in range(1, 81):
        double(torch.randn(n))
after = metrics.compile_counts()
graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
print(after[0] - before[0], graphs, len(after[2]) - len(before[2]))
"""


@pytest.mark.slow
def test_compile_counts_drop_no_record_past_64() -> None:
    """In a fresh process, where dynamo keeps its last 64 records: 80 compiles counted."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", COUNT_80], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    compiled, graphs, reasons = map(int, done.stdout.split())
    assert compiled == graphs == 80 and reasons == 79  # every recompile's reason, none dropped


def test_the_accuracy_sample_meets_every_column() -> None:
    logits = torch.arange(4 * 1000, dtype=torch.float64).reshape(1, 4, 1000)
    (sample,) = judged_outputs({"logits": logits})
    assert sample.numel() <= judged.SAMPLE
    small = judged.spread_sample(logits, 100)  # stride 40 would meet 25 of the 1000 columns
    assert small.numel() > 90 and len({int(v) % 1000 for v in small}) == small.numel()


def test_steady_shapes_keep_the_traffics_mix_of_eager_and_compiled() -> None:
    requests = tuple((1, n) for n in range(8, 28)) * 5  # 20 shapes, 100 requests
    eager = {(1, n) for n in range(8, 13)}  # a quarter of the requests ran eager
    weights = traffic.steady(requests, eager)
    assert sum(weights.values()) == pytest.approx(1.0) and len(weights) <= traffic.STEADY_SHAPES
    assert sum(w for s, w in weights.items() if s in eager) == pytest.approx(0.25)
    assert any(s in eager for s in weights) and any(s not in eager for s in weights)


def test_the_reference_covers_every_first_arrival_a_strategy_may_compile() -> None:
    requests = Workload(batch_size="1..8", seq_len="16..512", requests=200).traffic
    covered = set(traffic.reference_shapes(requests))
    buckets: dict[tuple[int, int], tuple[int, int]] = {}
    for b, s in requests:
        buckets.setdefault((traffic.bucket(b), traffic.bucket(s)), (b, s))
    assert set(buckets.values()) <= covered  # each pow2 bucket's first arrival
    assert set(traffic.first_arrivals(requests)[:8]) <= covered  # a static compile's
    assert len(covered) <= traffic.REFERENCE_SHAPES


@pytest.fixture(scope="module")
def confirmed() -> Iterator[dict[str, object]]:
    """Three static rivals over 4 shapes, and a stance beside a dynamic rival, each confirmed."""
    four = Workload(seq_len="8,16,24,32", requests=12)
    static = [Strategy.create("full", b, dynamic=False) for b in ("eager", "aot_eager")]
    static.append(Strategy.create("full", "aot_eager", dynamic=False, buckets="pow2"))
    long = Workload(seq_len=LENGTHS, requests=24)
    auto = Strategy.create("full", "aot_eager")
    guarded = Strategy.create("full", "aot_eager", stance="eager_on_recompile")
    settings = Settings(iters=4, warmup=1, starts=("cold",), timeout_s=300)
    yield {"static": confirm(LLAMA, four, static, settings, []), "static_keys": static,
           "stance": confirm(LLAMA, long, [auto, guarded], settings, []),
           "guarded": guarded, "trial": measure(LLAMA, long, guarded, QUICK)}  # fmt: skip


@pytest.mark.slow
def test_a_confirmation_isolates_each_rival(confirmed: dict) -> None:
    m = confirmed["static"]
    assert m.ok and len(m.rounds) == 4 and all(len(r) == 4 for r in m.rounds.values())
    for s in confirmed["static_keys"]:  # each compiled its own graphs: no shared budget
        graphs = 3 if s.buckets == "pow2" else 4  # buckets 8, 16 and 32
        assert m.traffic[s.key] == {"compiles": graphs, "ran_eager": []}, s.key


@pytest.mark.slow
def test_a_confirmation_serves_a_stance_as_its_trial_did(confirmed: dict) -> None:
    m, trial = confirmed["stance"], confirmed["trial"]
    key = confirmed["guarded"].key
    assert m.ok and m.traffic[key]["ran_eager"] == trial.traffic["ran_eager"] != []


MATMULS = ModelRef("tests.models:matmuls")
SLOWER = Strategy.create("full", "tests.models:dawdling_backend")  # 20 ms slower a call
QUICKER = Strategy.create("full", "tests.models:memo_backend")  # computes once
TWELVE = Settings(iters=12, warmup=1, starts=("cold",), timeout_s=300)
TWO_SHAPES = Workload(device="cpu", seq_len="64,128", requests=4)


def confirmation_child(workload: Workload, strategies: list[Strategy]) -> Measurement:
    """A confirmation's child of 12 rounds, run in this process."""
    torch._dynamo.reset()
    return fulfil(Request("confirm", strategies[0], MATMULS, workload, 12, 1, 0,
                          confirm=tuple(strategies)))  # fmt: skip


def test_a_confirmation_stops_where_no_round_left_could_show_a_speedup() -> None:
    """Over a traffic, a rival that loses its rounds stops after the least (5 of 12): 12
    could no longer show it; one that wins times all 12. At one shape, the strategies in one
    process stop only where none of them could be shown."""
    lost = confirmation_child(TWO_SHAPES, [SLOWER])
    assert lost.ok and [len(r) for r in lost.rounds.values()] == [5, 5]
    won = confirmation_child(TWO_SHAPES, [QUICKER])
    assert won.ok and [len(r) for r in won.rounds.values()] == [12, 12]
    one = Workload(device="cpu")
    alone = confirmation_child(one, [SLOWER])
    assert alone.ok and {len(r) for r in alone.rounds.values()} == {5}
    beside = confirmation_child(one, [SLOWER, QUICKER])
    assert beside.ok and {len(r) for r in beside.rounds.values()} == {12}


@pytest.mark.slow
def test_a_confirmation_that_stopped_one_rival_early_judges_the_next_on_all_its_rounds() -> None:
    """In processes of their own: the first rival stops at 5 rounds, the second times 12, and
    eager's scale is as long as the longest, so the second is judged on all 12."""
    m = confirm(MATMULS, TWO_SHAPES, [SLOWER, QUICKER], TWELVE, [])
    assert m.ok and {k: len(v) for k, v in m.rounds.items()} == {
        "none": 12, SLOWER.key: 5, QUICKER.key: 12}  # fmt: skip
    rows = [
        stored(s.key, n, point(s, c, ms))
        for n, (s, c, ms) in enumerate(
            [(Strategy("none"), 0.0, 10.0), (SLOWER, 1.0, 12.0), (QUICKER, 1.0, 5.0)]
        )
    ]
    found = candidates(rows)
    chosen = next(p for p in found if p.key == QUICKER.key)
    said = settle(found, chosen, m.rounds, "fastest", ("compile", "latency"), planned=12)
    assert said.pick == QUICKER.key  # shown: judged on its 12 rounds, not the first rival's 5
    won = re.fullmatch(rf"confirmed: {re.escape(QUICKER.key)} beat eager in (\d+) of 12 .*",
                       said.lines[1])  # fmt: skip
    assert won and int(won.group(1)) >= 10, said.lines  # a loaded machine may cost it a round
    assert said.lines[0].endswith("stopped: the 7 rounds left could not have shown it")
