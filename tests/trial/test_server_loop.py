"""The server loop (autotune/trial/server_loop.py): a traffic served through an exported file
in a plain loop agrees with the strategy's trial under every stance, plain, marked or bucketed;
a wrong backend is caught on both sides."""

from __future__ import annotations

import dataclasses
import json
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


GENERATIONS = Workload(kind="generate", seq_len="8..48", new_tokens="4..16", requests=12)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("prefill", "kv_cache", "buckets"),
    [("compiled", "single", "none"), ("eager", "single", "none"), ("eager", "quantiles", "none"),
     ("compiled", "single", "pow2"), ("compiled", "quantiles", "pow2")],
)  # fmt: skip
def test_a_plain_generate_loop_serves_a_generate_traffic_as_its_trial_measured(
    prefill: str, kv_cache: str, buckets: str, tmp_path: Path
) -> None:
    """The plain loop is ``autotune.apply_generation`` of the export and one ``generate`` a
    request: the graphs each request compiled (the prefill's recompiles where it is compiled,
    the decode's alone where it is eager, one static decode graph a cache where there is a
    cache a bucket, one static prefill graph a bucket where the prompts are padded) are the
    trial's, every request's tokens eager's."""
    from autotune.choice import as_served

    dynamic = False if kv_cache != "single" else None
    strategy = Strategy.create("full", "aot_eager", dynamic=dynamic, prefill=prefill,
                               kv_cache=kv_cache, buckets=buckets)  # fmt: skip
    m = parent.run_trial(LLAMA, GENERATIONS, strategy, QUICK)
    path = export.served_file(strategy, GENERATIONS, tmp_path / "best.json")
    generation = json.loads(path.read_text())["autotune"]["generation"]
    served = parent.serve(LLAMA, GENERATIONS, strategy, str(path), QUICK)
    assert m.ok and m.traffic is not None and served.ok and served.traffic is not None
    loop = served.traffic
    assert as_served.differences(m.traffic, loop) == [] and loop["wrong"] == []
    assert loop["through"] == "autotune.apply_generation"
    # one decode graph a cache; a compiled prefill compiles at new prompt lengths too
    caches = m.traffic["cache_lens"]  # the export's cache is its trial's longest
    assert generation["max_cache_len"] == max(caches) >= GENERATIONS.cache_len
    assert len(caches) == 1 if kv_cache == "single" else len(caches) > 1
    assert generation.get("cache_edges", caches) == caches
    prompts = {s for _, s in GENERATIONS.traffic}
    if prefill == "eager":
        assert sum(loop["compiles"]) == len(caches), (loop["compiles"], caches)
    elif buckets == "pow2":  # a prefill graph a bucket the prompts meet, a decode graph a cache
        padded = {1 << (s - 1).bit_length() for s in prompts}
        assert max(caches) >= max(padded)
        if kv_cache == "single":
            assert sum(loop["compiles"]) == len(padded) + 1, (loop["compiles"], padded)
        else:  # the prefill's graphs are per bucket and cache, the cache being their input too
            assert sum(loop["compiles"]) >= len(caches) + 1, (loop["compiles"], caches)
    else:
        assert sum(loop["compiles"]) >= 2
    assert "tokens as eager's" in as_served.agreed(strategy.key, loop, 1.0)
    # its times: each warm request against eager's in the loop's process, as in the trial's
    assert as_served.times(m, loop) == [], as_served.ratios(m.traffic, loop)
    assert "warm requests at" in as_served.agreed(strategy.key, loop, 1.0, m.traffic)
    # a trial that timed half of what generate takes (its own loop, not generate's) is caught,
    # judged whatever the load was (a half is past any noise); judged so, a loaded run's TTFT
    # may differ too (CI read 2.52x against 0.99x beside it), so only the token's is required
    half = {**m.traffic, "tpot_ms": [t / 2 for t in m.traffic["tpot_ms"]]}
    quiet = {k: v for k, v in m.timings.items() if not k.endswith("others_cpu")}
    slow = as_served.times(dataclasses.replace(m, traffic=half, timings=quiet),
                           {**loop, "others_cpu": 0.0})  # fmt: skip
    assert sum("eager's time a token in the loop" in s for s in slow) == 1, slow


@pytest.mark.slow
def test_a_decode_perturbing_backend_is_caught_by_the_plain_generate_loop(tmp_path: Path) -> None:
    wrong = Strategy.create("full", "tests.models:decode_perturbing_backend")
    path = export.served_file(wrong, GENERATIONS, tmp_path / "best.json")
    loop = parent.serve(LLAMA, GENERATIONS, wrong, str(path), QUICK).traffic
    assert loop is not None and {n for n, _ in loop["wrong"]} == set(range(1, 13)), loop
    assert "differs from eager" in loop["wrong"][0][1]


@pytest.mark.slow
def test_answers_that_end_at_eos_are_timed_and_served_as_they_end(tmp_path: Path) -> None:
    """``stop=eos`` over a traffic: the trial records where each greedy answer ended (before
    its row's most, for some), and the plain loop through the export, whose ``generate``
    stops there too, serves the same tokens with the same graphs."""
    from autotune.choice import as_served

    w = dataclasses.replace(GENERATIONS, stop="eos")
    model = ModelRef("tests.models:tiny_llama_eos")
    strategy = Strategy.create("full", "aot_eager")
    m = parent.run_trial(model, w, strategy, QUICK)
    assert m.ok and m.traffic is not None and m.tokens is not None, m.reason + m.log_tail
    ended, most = m.traffic["ended"], m.traffic["answers"]
    assert all(e <= n for e, n in zip(ended, most, strict=True)) and ended != most
    path = export.served_file(strategy, w, tmp_path / "best.json")
    loop = parent.serve(model, w, strategy, str(path), QUICK)
    assert loop.ok and loop.traffic is not None, loop.reason
    assert loop.traffic["wrong"] == [] and as_served.differences(m.traffic, loop.traffic) == []
