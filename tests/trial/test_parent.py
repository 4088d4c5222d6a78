"""The trial runner: a fresh child per strategy, and the parent survives every end of it."""

from __future__ import annotations

import json

import pytest

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.trial.parent import measure, run_trial
from autotune.workload import Settings, Workload

CPU = Workload(device="cpu")
QUICK = Settings(iters=5, warmup=1, timeout_s=120, starts=("cold",))  # starts: test_starts


def run(model: str, strategy: Strategy, settings: Settings = QUICK, **ref) -> Measurement:
    return measure(ModelRef(model, **ref), CPU, strategy, settings)


def test_ok_measurement_has_every_part() -> None:
    m = run("toy-64", Strategy.create("regional", "aot_eager"), layers=8)
    assert m.status == "ok", m.reason + m.log_tail
    assert m.compile_s and m.compile_s > 0
    assert m.eager_first_s and m.eager_first_s > 0
    assert m.latency and len(m.latency.samples_ms) == 5 and m.latency.median_ms > 0
    assert m.latency.p10_ms <= m.latency.median_ms <= m.latency.p90_ms
    assert m.eager_latency and m.speedup == pytest.approx(
        m.eager_latency.median_ms / m.latency.median_ms
    )
    assert m.memory and m.memory.eager_peak_mb > 10 and m.memory.kind == "cpu-rss-hwm"
    assert m.accuracy and m.accuracy.passed and m.accuracy.max_abs < 1e-5
    assert m.graphs and m.graphs.count >= 1
    assert m.regions == 9  # 8 blocks + the leading Linear, as Accelerate compiles them
    assert m.phases.get("total_s", 0) > 0
    assert m.environment["torch"].startswith("2.") and m.environment["cpu"]
    assert m.wall_s and m.wall_s > m.compile_s
    # the dict that crossed the pipe comes back whole
    assert Measurement.from_dict(m.to_dict()) == m


def test_eager_baseline_is_never_compiled() -> None:
    m = run("toy-64", Strategy.create("none"), layers=4)
    assert m.status == "ok" and m.compile_s == 0.0 and m.regions == 0
    assert m.graphs is not None and m.graphs.count == 0


def test_abort_is_crashed_and_parent_fine() -> None:
    m = run("tests.models:aborting", Strategy.create("full", "eager"))
    assert m.status == "crashed"
    assert "SIGABRT" in m.reason


def test_hang_is_timeout() -> None:
    from autotune.trial.reference import Reference

    none = Reference.none("a model that never answers has none")
    m = run_trial(ModelRef("tests.models:sleeping"), CPU, Strategy.create("full", "eager"),
                Settings(timeout_s=8), none)  # fmt: skip
    assert m.status == "timeout"
    assert "8 s" in m.reason and m.wall_s is not None and m.wall_s < 60


def test_fullgraph_on_a_graph_break_fails_with_the_reason() -> None:
    m = run("tests.models:graph_break", Strategy.create("full", "eager", fullgraph=True))
    assert m.status == "failed"
    assert "graph_break" in m.reason or "graph break" in m.reason.lower()
    ok = run("tests.models:graph_break", Strategy.create("full", "eager"))
    assert ok.status == "ok" and ok.graphs and ok.graphs.breaks == 1
    assert ok.graphs.count == 2 and ok.graphs.break_reasons


def test_wrong_backend_is_an_accuracy_failure() -> None:
    m = run("tests.models:tiny_toy", Strategy.create("full", "tests.models:wrong_backend"))
    assert m.status == "ok" and m.accuracy is not None
    assert not m.accuracy.passed and not m.feasible
    assert m.accuracy.max_abs == pytest.approx(1.0, abs=1e-5)


def test_per_layer_int_attribute_recompiles_are_counted_with_reasons() -> None:
    m = run("tests.models:int_attrs", Strategy.create("regional", "eager"))
    assert m.status == "ok" and m.graphs is not None
    assert m.graphs.recompiles == 3  # 4 blocks, one compile each after the first
    assert any("index" in r for r in m.graphs.recompile_reasons)


def test_no_repeated_blocks_is_not_applicable() -> None:
    m = run("tests.models:flat", Strategy.create("nested", "eager"))
    assert m.status == "not-applicable" and "repeated blocks" in m.reason


def test_cuda_only_strategy_is_not_applicable_without_spawning() -> None:
    m = run("toy-64", Strategy.create("full", "inductor", "reduce-overhead"))
    assert m.status == "not-applicable" and "CUDA graphs" in m.reason and m.wall_s is None


def test_train_workload_checks_gradients() -> None:
    train = Workload(device="cpu", kind="train")
    m = measure(ModelRef("toy-64", layers=4), train, Strategy.create("full", "aot_eager"), QUICK)
    assert m.status == "ok" and m.accuracy and m.accuracy.passed
    bad = measure(
        ModelRef("tests.models:tiny_toy"), train,
        Strategy.create("full", "tests.models:wrong_backend"), QUICK,
    )  # fmt: skip
    assert bad.status == "ok" and bad.accuracy and not bad.accuracy.passed


@pytest.mark.slow
def test_inductor_compile_is_cold_in_every_child() -> None:
    """Two identical inductor trials both compile from scratch: nothing is inherited."""
    strategy = Strategy.create("full", "inductor")
    first, second = (run("toy-64", strategy, layers=2) for _ in range(2))
    assert first.status == second.status == "ok"
    assert first.phases.get("inductor_s", 0) > 0.2 and second.phases.get("inductor_s", 0) > 0.2
    assert second.compile_s > 0.5 * first.compile_s


def test_a_request_is_typed_and_travels_as_a_dict() -> None:
    """The parent builds one typed request; the child reads it back and dispatches on its kind,
    never on which keys a dict happens to hold."""
    from autotune.catalog import ModelRef
    from autotune.trial.request import Request
    from autotune.workload import Settings, Workload

    ref, work = ModelRef("toy-64", layers=2), Workload(device="cpu")
    cold = Request.trial(ref, work, Strategy.create("full", "eager"), Settings(iters=7))
    portable = cold.but(load_artifact="/x/cache.bin", iters=3)
    for request in (cold, portable, cold.but(load_ahead=("aot", "/x/a.pt2"))):
        assert Request.from_dict(json.loads(json.dumps(request.to_dict()))) == request
    assert (cold.iters, portable.iters, portable.strategy) == (7, 3, cold.strategy)
    for bad in ({"kind": "warm"}, {"kind": "reference"}, {"kind": "confirm"},
                {"reference_out": "/x/r.pt"}):  # fmt: skip
        with pytest.raises(ValueError, match="request"):
            cold.but(**bad)
