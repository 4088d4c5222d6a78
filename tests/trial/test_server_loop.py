"""The server loop (autotune/trial/server_loop.py): a traffic served through an exported file
in a plain loop agrees with the strategy's trial under every stance, plain, marked or bucketed;
a wrong backend is caught on both sides."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from autotune.catalog import ModelRef
from autotune.ship import export
from autotune.strategy import Strategy
from autotune.trial import metrics, parent
from autotune.trial.reference import make
from autotune.workload import Settings, Workload

LLAMA = ModelRef("tests.models:tiny_llama")
QUICK = Settings(iters=4, warmup=1, starts=("cold",), timeout_s=300)
FIRST_REPEATS = ((1, 16), (1, 24), (1, 16), (1, 40), (1, 16), (1, 24))
TRAFFIC = Workload(traffic=FIRST_REPEATS)
KINDS = {"plain": {}, "marks": {"marks": "seq"}, "buckets": {"buckets": "pow2"}}
STANCES = ("default", "eager_on_recompile", "eager_then_compile")


@pytest.fixture(scope="module")
def reference() -> object:
    """The study's reference, computed once for every trial here."""
    return make(LLAMA, TRAFFIC, QUICK)


def trial_and_loop(strategy: Strategy, reference: object, folder: Path) -> tuple:
    """The strategy's trial over the traffic, and the plain loop through its export."""
    m = parent.run_trial(LLAMA, TRAFFIC, strategy, QUICK, reference)  # type: ignore[arg-type]
    path = export.served_file(strategy, TRAFFIC, folder / "best.json")
    loop = parent.serve(LLAMA, TRAFFIC, strategy, str(path), QUICK, None, reference)  # type: ignore[arg-type]
    assert m.ok and m.traffic is not None and m.accuracy is not None, m.reason
    assert loop.ok and loop.traffic is not None, loop.reason
    return m, loop.traffic


def test_around_compiles_reads_dynamo_s_callbacks() -> None:
    """metrics.around_compiles registers Dynamo's private compile callbacks: this fails if
    they change. One compile, one start and one end; a cached call, none."""
    seen: list[str] = []
    torch._dynamo.reset()
    fn = torch.compile(lambda x: x * 2 + 1, backend="eager")
    with metrics.around_compiles(lambda: seen.append("start"), lambda: seen.append("end")):
        fn(torch.ones(3))
        fn(torch.ones(3))
    fn(torch.ones(4))  # outside the block: nothing heard
    torch._dynamo.reset()
    assert seen == ["start", "end"], seen
    assert sys.getprofile() is None


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("stance", STANCES)
def test_a_plain_loop_serves_the_traffic_as_its_trial_measured(
    stance: str, kind: str, reference: object, tmp_path: Path
) -> None:
    """The graphs each request compiled and the requests served eager, request by request,
    and every output eager's, over a traffic whose first shape repeats."""
    strategy = Strategy.create("full", "aot_eager", stance=stance, **KINDS[kind])
    m, loop = trial_and_loop(strategy, reference, tmp_path)
    assert m.accuracy.passed, m.accuracy.detail
    assert (loop["compiles"], loop["ran_eager"]) == (m.traffic["compiles"], m.traffic["ran_eager"])
    assert loop["wrong"] == [], loop["wrong"]
    assert sum(loop["compiles"]) >= 1 and loop["graphs"] == sum(loop["compiles"])


@pytest.mark.slow
@pytest.mark.parametrize("stance", STANCES)
def test_an_off_by_one_backend_fails_the_gate_and_the_loop_under_every_stance(
    stance: str, reference: object, tmp_path: Path
) -> None:
    strategy = Strategy.create("full", "tests.models:wrong_backend", stance=stance)
    m, loop = trial_and_loop(strategy, reference, tmp_path)
    assert not m.accuracy.passed, m.accuracy.detail
    assert "nothing compiled ran" not in m.accuracy.detail
    # every request served compiled is wrong (one that ran partly eager may be too: under
    # eager_then_compile the first ran its model's forward eager and its second layer compiled)
    compiled = {n for n in range(1, len(FIRST_REPEATS) + 1) if n not in loop["ran_eager"]}
    assert compiled and compiled <= {n for n, _ in loop["wrong"]}, loop
