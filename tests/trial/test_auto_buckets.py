"""``--buckets auto`` measured (autotune/trial/auto_buckets.py): a pilot prices the buckets, the
trial measures the edges it chose like any bucket kind, and a plain loop through the export
pads to the same edges."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from autotune.catalog import ModelRef
from autotune.errors import ConfigError
from autotune.strategy import Strategy
from autotune.trial import parent
from autotune.workload import Settings, Workload

LLAMA = ModelRef("tests.models:tiny_llama")
QUICK = Settings(iters=4, warmup=1, starts=("cold",), timeout_s=300)
TRAFFIC = Workload(seq_len="8..72", requests=30)


def test_a_strategy_carries_its_edges_through_a_dict_and_refuses_bad_ones() -> None:
    s = Strategy.create("full", "aot_eager", buckets="auto:3", edges=[[1], [16, 40, 72]])
    again = Strategy.from_dict(s.to_dict())
    assert again.edges == ((1,), (16, 40, 72)) and again.key.endswith("buckets=auto:3")
    assert Strategy.create("full", "aot_eager", buckets="pow2", edges=[[1], [8]]).edges is None
    for bad in ([[1], [40, 16]], [[0], [8]], [[1]], "16,32"):
        with pytest.raises(ConfigError, match="bad edges"):
            Strategy.create("full", "aot_eager", buckets="auto", edges=bad)
    with pytest.raises(ConfigError, match="auto:K"):
        Strategy.create("full", "aot_eager", buckets="auto:0")


@pytest.fixture(scope="module")
def auto_trial() -> object:
    """One ``auto:4`` trial over the traffic, for the tests below."""
    return parent.run_trial(LLAMA, TRAFFIC, Strategy.create("full", "aot_eager",
                                                            buckets="auto:4"), QUICK)  # fmt: skip


@pytest.mark.slow
def test_an_auto_trial_measures_the_edges_its_pilot_priced_and_a_loop_serves_them(
    auto_trial: object, tmp_path: Path
) -> None:
    edges = importlib.import_module("autotune.strategy.edges")
    from autotune.ship import export
    from autotune.strategy import shapes

    m = auto_trial
    assert m.ok and m.traffic is not None, m.reason
    found, auto = m.strategy.edges, m.traffic["auto"]
    requests = TRAFFIC.traffic
    assert found is not None and found[1][-1] == max(s for _, s in requests)
    assert len(found[1]) <= 4 and [list(e) for e in found] == auto["edges"]
    # each bucket the traffic hits compiled once, none ran eager
    hit = shapes.hit("auto:4", requests, found)
    assert sum(m.traffic["compiles"]) == hit and m.traffic["ran_eager"] == []
    # the edges are the least cost at the prices the pilot measured
    model = edges.LatencyModel(**auto["model"])
    assert edges.choose(requests, auto["stall_s"], model, auto["calls"], 4) == found
    assert auto["predicted"]["total_s"] <= auto["pow2"]["total_s"] + 1e-9
    assert auto["measured"]["stalls_s"] == pytest.approx(m.compile_s)
    # a plain loop through the export pads to the same edges: the same graphs, eager's outputs
    path = export.served_file(m.strategy, TRAFFIC, tmp_path / "best.json")
    loop = parent.serve(LLAMA, TRAFFIC, m.strategy, str(path), QUICK, None, None)
    assert loop.ok and loop.traffic is not None, loop.reason
    assert loop.traffic["compiles"] == m.traffic["compiles"] and loop.traffic["wrong"] == []


@pytest.mark.slow
def test_show_and_the_dashboard_list_an_auto_trial_s_buckets(auto_trial: object,
                                                            tmp_path: Path) -> None:  # fmt: skip
    from autotune import dashboard
    from autotune.cli import traffic_lines
    from autotune.storage import Store
    from tests.helpers import point

    m = auto_trial
    lines = traffic_lines.bucket_lines(m)
    found = m.strategy.edges[1]
    assert lines[0].startswith("  buckets  auto edges: batch 1; seq " + ", ".join(map(str, found)))
    assert "predicted" in lines[0] and "measured" in lines[0]
    shown = [line for line in lines if line.startswith("  bucket   ")]
    assert [int(x.split(" seq ")[1].split(":")[0]) for x in shown] == list(found)
    store = Store(f"sqlite:///{tmp_path}/t.db")
    store.add_study(
        "t", {"model": {"name": "toy-64"}, "workload": TRAFFIC.to_dict(), "policy": "fastest"}, {}
    )
    store.add_measurement("t", m.strategy.key, 0, m.to_dict())
    eager = point(Strategy.create("none"), 0.0, 1.0)
    store.add_measurement("t", "none", 1, {**eager, "workload": TRAFFIC.to_dict(),
                                           "traffic": m.traffic})  # fmt: skip
    text = dashboard.write(store, "t", str(tmp_path / "t.html")).read_text()
    assert "Buckets (batch x seq edge)" in text and f"1x{found[-1]}" in text
