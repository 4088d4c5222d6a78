"""--workload generate: prefill + greedy decode with a static KV cache, each trial in a child."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

import autotune
from autotune import cli, device
from autotune.catalog import ModelRef
from autotune.errors import ConfigError
from autotune.ship import export
from autotune.storage import Store
from autotune.strategy import Strategy
from autotune.trial import metrics
from autotune.trial.measurement import Latency, Measurement, TokenCheck
from autotune.trial.parent import Settings, measure
from autotune.trial.scenarios import generate
from autotune.workload import Workload
from tests import models

TINY = ModelRef("tests.models:tiny_llama")
GEN = Workload(batch_size=2, seq_len=8, kind="generate", new_tokens=6)
QUICK = Settings(iters=2, warmup=1, timeout_s=300)


def test_generate_workload_is_validated() -> None:
    with pytest.raises(ConfigError, match="--new-tokens must be at least 2"):
        Workload(kind="generate", new_tokens=1)
    assert GEN.cache_len == 14
    assert GEN.slug() == "generate-b2-s8-n6-float32-cpu"
    assert "new_tokens" not in Workload().to_dict()  # other workloads' stored dicts unchanged
    assert Workload.from_dict(GEN.to_dict()) == GEN


@pytest.mark.parametrize("granularity", ["full", "regional", "nested"])
def test_tokens_equal_eager(granularity: str) -> None:
    m = measure(TINY, GEN, Strategy.create(granularity, "aot_eager"), QUICK)
    assert m.status == "ok", m.reason + m.log_tail
    assert m.tokens == TokenCheck(True, 6, 6, "")
    assert m.feasible and m.accuracy and m.accuracy.passed
    assert m.latency and m.eager_latency and m.ttft and m.eager_ttft
    assert len(m.latency.samples_ms) == QUICK.iters * 5  # every decode step of every round
    assert len(m.ttft.samples_ms) == QUICK.iters
    assert m.tokens_per_s and m.eager_tokens_per_s and m.compile_s and m.compile_s > 0
    assert m.graphs and m.graphs.recompiles >= 1  # prefill -> decode changes the shapes
    assert m.graphs.recompile_reasons  # generate's decode calls differ from its prefill
    assert not m.limit_hit


def test_backend_that_perturbs_decode_logits_fails_the_token_check() -> None:
    backend = "tests.models:decode_perturbing_backend"
    m = measure(TINY, GEN, Strategy.create("full", backend), QUICK)
    assert m.status == "ok", m.reason + m.log_tail
    assert m.tokens and not m.tokens.passed
    assert m.tokens.matched == 1  # the prefill's token is right, the first decode step's wrong
    assert "token 2 of 6 differs from eager" in m.tokens.detail
    assert m.accuracy and not m.accuracy.passed and not m.feasible


def test_per_layer_int_attributes_hit_the_recompile_limit_in_words() -> None:
    m = measure(ModelRef("tests.models:int_attrs_16"), Workload(),
                Strategy.create("regional", "eager"), Settings(iters=2, warmup=1))  # fmt: skip
    assert m.status == "ok", m.reason + m.log_tail
    assert m.limit_hit and m.graphs
    assert m.graphs.limit_hit.startswith("recompile limit (8) hit: 8 of 16 blocks ran eager")
    assert "self.index == 7" in m.graphs.limit_hit
    assert "allow_unspec_int_on_nn_module" in m.graphs.limit_hint
    assert (m.graphs.eager_blocks, m.graphs.blocks) == (8, 16)
    assert Measurement.from_dict(json.loads(json.dumps(m.to_dict()))).limit_hit


def test_limit_hits_reads_dynamo_records_in_process() -> None:
    """metrics.limit_hits reads torch's private compilation metrics: this fails if they change."""
    from torch._dynamo.utils import clear_compilation_metrics

    torch._dynamo.reset()
    clear_compilation_metrics()
    try:
        model, (x,) = models.int_attrs_16()
        compiled = autotune.apply(model, Strategy.create("regional", "eager"))
        with torch.no_grad():
            compiled(x)
        hits = metrics.limit_hits()
    finally:
        torch._dynamo.reset()
        clear_compilation_metrics()
    assert len(hits) == 1, hits
    hit = hits[0]
    assert hit["function"].startswith("forward (") and "models.py" in hit["function"]
    assert (hit["limit_type"], hit["limit"], hit["graphs"]) == ("recompile_limit", 8, 8)
    assert "self.index == 7" in hit["reason"] and "allow_unspec_int_on_nn_module" in hit["reason"]


def test_four_blocks_stay_under_the_limit() -> None:
    m = measure(ModelRef("tests.models:int_attrs"), Workload(),
                Strategy.create("regional", "eager"), Settings(iters=2, warmup=1))  # fmt: skip
    assert m.status == "ok" and m.graphs and m.graphs.recompiles == 3
    assert not m.limit_hit and m.graphs.limit_hint == ""


@pytest.mark.parametrize("model", ["toy-64", "tests.models:tiny_toy", "vit-dir"])
def test_generate_on_a_non_causal_model_is_one_line_exit_2(
    model: str, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if model == "vit-dir":
        model = str(in_tmp / "vit")
        Path(model).mkdir()
        (Path(model) / "config.json").write_text('{"model_type": "vit", "num_hidden_layers": 2}')
    code = cli.main(["measure", "--model", model, "--workload", "generate"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "--workload generate needs a causal language model" in err


def test_new_tokens_below_two_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["measure", "--model", "gpt2", "--workload", "generate", "--new-tokens", "1"])
    assert code == 2 and "--new-tokens must be at least 2" in capsys.readouterr().err


def test_loop_gives_model_generate_tokens_and_keeps_cache_addresses() -> None:
    model, (prompt,) = models.tiny_llama()
    eager = generate.Generation(model, generate.new_cache(model, GEN), prompt, 6, "cpu")
    first = eager.run()
    cache = generate.new_cache(model, GEN, like=eager.cache)  # allocated before any call
    addresses = [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in cache.layers]
    gen = generate.Generation(model, cache, prompt, 6, "cpu")
    for _ in range(2):  # reset in place between generations
        assert torch.equal(gen.run().tokens, first.tokens)
    assert [(lay.keys.data_ptr(), lay.values.data_ptr()) for lay in cache.layers] == addresses
    reference = model.generate(prompt, max_new_tokens=6, do_sample=False,
                               cache_implementation="static")  # fmt: skip
    assert torch.equal(reference[:, prompt.shape[1] :], first.tokens)
    assert len(set(first.tokens.flatten().tolist())) > 2  # the check compares real variety


@pytest.mark.slow
@pytest.mark.parametrize("granularity", ["full", pytest.param("regional", marks=pytest.mark.slow)])
def test_the_kv_cache_is_allocated_before_the_first_compiled_call(granularity: str) -> None:
    """transformers allocates a StaticCache's tensors on its first update and marks them static
    only outside a trace: first updated inside a compiled prefill, they are the graph's outputs
    (with CUDA graphs, decode then mutates outputs of the prefill's graph, or runs without
    graphs). apply_generation's generate (a fresh lazy cache per call) and the confirmation's
    generation (a lazy cache of new_cache) allocate it before the compiled call."""
    from autotune.strategy.granularity import generator

    model, (prompt,) = models.tiny_llama()
    strategy = Strategy.create(granularity, "eager")
    torch._dynamo.reset()
    try:
        gen = autotune.apply_generation(model, strategy)
        out = gen.generate(prompt, max_new_tokens=3, do_sample=False,
                           return_dict_in_generate=True)  # fmt: skip
        lazy = generate.new_cache(model, GEN)  # as the confirmation's child makes it
        assert not lazy.is_initialized
        generate.Generation(generator(model, strategy), lazy, prompt, 3, "cpu").run()
        inside = generate.new_cache(model, GEN)  # first updated inside a compiled call
        generate.Generation(torch.compile(model, backend="eager"), inside, prompt, 3, "cpu").run()
    finally:
        torch._dynamo.reset()
    for cache in (out.past_key_values, lazy):
        assert cache.is_initialized
        assert [getattr(layer.keys, "_dynamo_static_input_type", None)
                for layer in cache.layers] == ["unguarded"] * len(cache.layers)  # fmt: skip
    assert inside.is_initialized  # the check bites: traced, the tensors are not marked
    assert not hasattr(inside.layers[0].keys, "_dynamo_static_input_type")


def test_cache_keyword_is_cache_where_the_forward_takes_it() -> None:
    import transformers

    def current(input_ids: torch.Tensor, cache: object = None, **kwargs: object) -> None: ...
    def older(input_ids: torch.Tensor, past_key_values: object = None, **kw: object) -> None: ...

    assert generate.cache_keyword(current) == "cache"
    assert generate.cache_keyword(older) == "past_key_values"  # **kwargs would swallow cache=
    model, _ = models.tiny_llama()
    installed = tuple(int(part) for part in transformers.__version__.split(".")[:2])
    expected = "cache" if installed >= (5, 24) else "past_key_values"  # cache= came in 5.24.0
    assert generate.cache_keyword(model.forward) == expected
    compiled = autotune.apply_generation(model, Strategy.create("full", "eager"))
    assert generate.cache_keyword(compiled.forward) == expected  # the wrapper keeps its signature


def test_early_initialization_gets_one_number_when_every_layer_agrees() -> None:
    assert generate._per_layer([2, 2, 2]) == 2  # transformers 5.0 takes only a number
    assert generate._per_layer([2, 4, 2]) == [2, 4, 2]  # per-layer shapes need a list


def test_a_generation_passes_the_cache_without_a_deprecation_warning() -> None:
    model, (prompt,) = models.tiny_llama()
    eager = generate.Generation(model, generate.new_cache(model, GEN), prompt, 4, "cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = eager.run()
    assert [str(w.message) for w in caught if "deprecated" in str(w.message)] == []
    seen: list[str] = []

    def older(input_ids: torch.Tensor, past_key_values: object = None, **kwargs: object) -> object:
        seen.append("past_key_values" if past_key_values is not None else "none")
        return model(input_ids=input_ids, use_cache=True,
                     **{generate.cache_keyword(model.forward): past_key_values})  # fmt: skip

    cache = generate.new_cache(model, GEN)
    again = generate.Generation(older, cache, prompt, 4, "cpu").run()
    assert seen == ["past_key_values"] * 4  # the prefill and 3 decode steps got the cache
    assert torch.equal(again.tokens, first.tokens)


def test_cudagraph_steps_are_marked_only_for_cuda_graph_strategies() -> None:
    overhead = Strategy.create("full", "inductor", "reduce-overhead")
    cuda = Workload(device="cuda:0", kind="generate")
    assert device.marks_steps(cuda.device, overhead.uses_cuda_graphs())
    plain = Strategy.create("full", "inductor")
    assert not device.marks_steps(cuda.device, plain.uses_cuda_graphs())
    assert not device.marks_steps(GEN.device, overhead.uses_cuda_graphs())


def test_generate_fields_round_trip_through_the_store(tmp_path: Path) -> None:
    lat = Latency.from_samples([0.01, 0.02])
    m = Measurement(
        Strategy.create("full", "eager").to_dict(), TINY.to_dict(), GEN.to_dict(), "ok",
        latency=lat, eager_latency=lat, ttft=lat, eager_ttft=lat, tokens_per_s=50.0,
        eager_tokens_per_s=40.0, tokens=TokenCheck(False, 6, 3, "token 4 of 6 differs"),
    )  # fmt: skip
    store = Store(f"sqlite:///{tmp_path}/g.db")
    store.add_study("g", {"model": TINY.to_dict()}, {})
    store.add_measurement("g", "full/eager", 0, m.to_dict())
    back = Measurement.from_dict(store.measurements("g")[0].payload)
    assert back == m and isinstance(back.ttft, Latency) and isinstance(back.tokens, TokenCheck)


def _export(tmp_path: Path, strategy: Strategy) -> Path:
    from tests.helpers import point

    store = Store(f"sqlite:///{tmp_path}/x.db")
    store.add_study("x", {"model": TINY.to_dict(), "workload": GEN.to_dict()}, {})
    store.add_measurement("x", "none", 0, point(Strategy.create("none"), 0.0, 10.0))
    store.add_measurement("x", strategy.key, 1, point(strategy, 1.0, 2.0))
    path, chosen, _ = export.export(
        store, "x", "fastest", "transformers", str(tmp_path / "best.json")
    )
    assert chosen.key == strategy.key
    return path


@pytest.mark.parametrize("granularity", ["full", pytest.param("regional", marks=pytest.mark.slow)])
def test_transformers_export_round_trips_through_compile_config_and_generate(
    granularity: str, tmp_path: Path
) -> None:
    from torch._dynamo.utils import counters
    from transformers import CompileConfig, GenerationConfig

    strategy = Strategy.create(granularity, "aot_eager", fullgraph=True)
    data = json.loads(_export(tmp_path, strategy).read_text())
    fields = data["generation_config"]
    config = CompileConfig(**fields["compile_config"])  # the real class takes exactly these
    assert config.to_dict() == fields["compile_config"]
    assert (config.backend, config.fullgraph, config.mode) == ("aot_eager", True, None)
    GenerationConfig(**{**fields, "compile_config": config}).validate(strict=True)
    caveats = data["autotune"]["caveats"]
    assert any("apply_generation" in c for c in caveats)
    assert any("granularity 'regional'" in c for c in caveats) == (granularity == "regional")

    model, (prompt,) = models.tiny_llama()
    expected = model.generate(prompt, max_new_tokens=6, do_sample=False)
    torch._dynamo.reset()
    counters.clear()
    try:
        gen = autotune.apply_generation(model, tmp_path / "best.json")
        actual = gen.generate(prompt, max_new_tokens=6, do_sample=False)
        assert counters["stats"]["unique_graphs"] >= 2  # prefill and decode ran compiled
    finally:
        torch._dynamo.reset()
    assert torch.equal(actual, expected)
    assert model.generation_config.cache_implementation is None  # the user's model untouched
    assert gen.generation_config.cache_implementation == "static"


@pytest.mark.slow
def test_search_over_fast_backends_on_gpt2(in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    code = cli.main([
        "search", "--model", "gpt2", "--layers", "2", "--workload", "generate", "--seq-len", "8",
        "--new-tokens", "4", "--granularity", "none,full", "--backend", "eager,aot_eager",
        "--trials", "3", "--iters", "2", "--warmup", "1", "--no-progress", "--json",
        "--format", "transformers",
    ])  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert "generate-b1-s8-n4" in result["study"]
    rows = Store(f"sqlite:///{in_tmp}/studies/autotune.db").measurements(result["study"])
    measured = [Measurement.from_dict(r.payload) for r in rows]
    assert len(measured) == 3 and all(m.ok for m in measured)
    assert all(m.ttft and m.tokens and m.tokens.passed and m.tokens.tokens == 4 for m in measured)
    assert "generation_config" in json.loads(Path(result["export"]).read_text())
    import optuna

    study = optuna.load_study(
        study_name=result["study"], storage=f"sqlite:///{in_tmp}/studies/autotune.db"
    )
    assert study.metric_names == ["compile_s", "decode_ms_per_token"]  # the default for generate
    assert all(p["ttft_ms"] and p["tokens_per_s"] for p in result["pareto_front"])


def test_decode_and_ttft_objectives_need_a_generate_workload(in_tmp: Path, capsys) -> None:
    code = cli.main(["search", "--model", "toy-64", "--objectives", "compile,ttft"])
    err = capsys.readouterr().err
    assert code == 2 and "need --workload generate" in err and err.count("\n") == 1


def test_summary_shows_ttft_decode_tokens_and_the_limit_hit() -> None:
    from autotune.cli import report
    from autotune.trial.measurement import Accuracy, Graphs

    fast, slow = Latency.from_samples([0.01] * 4), Latency.from_samples([0.02] * 4)
    m = Measurement(
        Strategy.create("regional", "eager").to_dict(), TINY.to_dict(), GEN.to_dict(), "ok",
        compile_s=1.0, latency=fast, eager_latency=slow, speedup=2.0, ttft=fast, eager_ttft=slow,
        tokens_per_s=90.0, eager_tokens_per_s=45.0, tokens=TokenCheck(True, 6, 6),
        accuracy=Accuracy(0.0, 0.0, True, 1e-5, 1e-3),
        graphs=Graphs(limit_hit="recompile limit (8) hit: 8 of 16 blocks ran eager",
                      limit_hint="make this integer dynamic"),
    )  # fmt: skip
    text = report.summary(m)
    assert "TTFT       10.000 ms median prefill (eager 20.000 ms -> 2.00x)" in text
    assert "decode     10.000 ms per token" in text and "over 4 steps" in text
    assert "tokens/s   90.0 for the whole generation (eager 45.0)" in text
    assert "6 of 6 greedy tokens as eager's" in text
    assert "LIMIT    recompile limit (8) hit: 8 of 16 blocks ran eager" in text


def test_the_cache_shape_comes_from_the_config_s_public_fields() -> None:
    import transformers

    from autotune.strategy.granularity import cache_shape

    llama = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
    assert cache_shape(llama) == (2, 16)
    assert cache_shape(transformers.GPT2Config(n_embd=64, n_head=4)) == (4, 16)
    mla = transformers.DeepseekV3Config(kv_lora_rank=16, qk_rope_head_dim=8)
    assert cache_shape(mla) is None and cache_shape(None) is None


@pytest.mark.slow
def test_apply_generation_keeps_a_static_cache_where_the_config_turns_the_cache_off() -> None:
    """The catalog builds its models with ``use_cache=False`` (a forward's outputs hold no
    cache), as users' own configs may: apply_generation still generates with the static KV
    cache it measured, not by recomputing the whole sequence each token (one new shape per
    token, a CUDA graph recorded for each: found by bench/gpu.py's check 6 on an H100)."""
    from autotune import catalog

    workload = Workload.create(kind="generate", new_tokens=3)
    model, (prompt,) = catalog.build(ModelRef("gemma-2b", layers=1), workload)
    assert model.generation_config.use_cache is False  # the case: the cache is off
    gen = autotune.apply_generation(model, Strategy.create("full", "eager"))
    out = gen.generate(prompt, max_new_tokens=3, do_sample=False, return_dict_in_generate=True)
    assert type(out.past_key_values).__name__ == "StaticCache"
    assert model.generation_config.use_cache is False  # the caller's model is left as it was
    want = model.generate(prompt, max_new_tokens=3, do_sample=False)
    assert torch.equal(out.sequences, want)


def test_a_timed_prefill_leaves_the_cache_s_reset_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reset zeroes the whole static cache: timed inside the prefill, a long cache (eager's)
    paid more TTFT than a bucket's short one for work no request does. Here a reset that takes
    0.2 s stands for a large model's cache; the prefill's time leaves it out."""
    import time

    from transformers import StaticCache

    reset = StaticCache.reset

    def slow(self: StaticCache) -> None:
        time.sleep(0.2)
        reset(self)

    model, (prompt,) = models.tiny_llama()
    monkeypatch.setattr(StaticCache, "reset", slow)
    cache = generate.new_cache(model, GEN.at((prompt.shape[0], prompt.shape[1])))
    gen = generate.Generation(model.forward, cache, prompt, 3, "cpu")  # by hand: no generate
    assert not gen.generates
    for first in (True, False):
        run = gen.run(first=first)
        assert run.tokens.shape == (prompt.shape[0], 3)
        assert run.prefill_s < 0.2, run.prefill_s


@pytest.mark.slow
def test_an_eager_prefill_is_no_cuda_graph_recording() -> None:
    """CUDA graphs record at a graph's second call: the decode step's at the second step, the
    prefill's in a second generation, whose prefill time the first calls added to compile_s.
    A prefill left eager records nothing, and its time (here 0.5 s) is no recording. The
    backend records as CUDA-graph trees do (0.5 s); recordings are counted from its log."""
    from autotune.trial.request import Request
    from autotune.trial.scenarios import begin

    torch._dynamo.reset()
    eager_prefill = Strategy.create("full", "tests.models:recording_backend", prefill="eager")
    w = Workload(batch_size=1, seq_len=8, kind="generate", new_tokens=4)
    slow = ModelRef("tests.models:slow_eager_prefill")
    m = generate.Generate(begin(Request.trial(slow, w, eager_prefill, QUICK))).run()
    recording = m.timings["cuda_graph_recording_s"]  # the decode step's, at its second step
    assert models.RECORD_S <= recording < models.RECORD_S + models.PREFILL_S, recording
