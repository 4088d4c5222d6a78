"""A generate strategy's prefill (autotune/strategy/prefill.py): padded to a bucket of prompt
lengths, one static prefill graph a bucket, the cache cut back to the prompt so that decode
writes from there, every request's tokens eager's."""

from __future__ import annotations

import importlib

import pytest
import torch

import autotune
from autotune.errors import ConfigError
from autotune.strategy import Strategy
from tests import models
from tests.helpers import generated_graphs


def test_a_prompt_s_bucket_by_kind() -> None:
    prefill = importlib.import_module("autotune.strategy.prefill")
    assert [prefill.padded("pow2", s) for s in (9, 16, 17, 100)] == [16, 16, 32, 128]
    found = prefill.edges_of("quantiles", [10, 20, 30, 40, 50, 60, 70, 80])
    assert found == (20, 40, 60, 80)
    assert [prefill.padded("quantiles", s, found) for s in (10, 41, 80, 90)] == [20, 60, 80, 128]
    assert prefill.padded("none", 37) == 37 and prefill.edges_of("pow2", [10]) is None


def test_buckets_pad_a_compiled_prefill_only() -> None:
    padded = Strategy.create("full", "aot_eager", buckets="pow2")
    assert padded.key.endswith("/buckets=pow2") and padded.dynamic is False  # static buckets
    eager = Strategy.create("full", "aot_eager", buckets="pow2", prefill="eager")
    assert eager == Strategy.create("full", "aot_eager", prefill="eager")  # nothing to pad
    with pytest.raises(ConfigError, match="marks and stances are not measured for it yet"):
        Strategy.create("full", "aot_eager", marks="seq").check_workload("generate")
    with pytest.raises(ConfigError, match="--prefill and --kv-cache are the generate"):
        Strategy.create("full", "aot_eager", kv_cache="pow2").check_workload("inference")
    padded.check_workload("generate")  # a pow2 prefill is a generate workload's


@pytest.mark.slow
def test_a_padded_prefill_compiles_one_graph_a_bucket_and_answers_eager_s_tokens() -> None:
    torch._dynamo.reset()
    model, _ = models.tiny_llama()
    gen = autotune.apply_generation(model, Strategy.create("full", "aot_eager", buckets="pow2"))
    gen.generation_config.max_cache_len = 80
    # buckets 16, 16, 32, 64, 32
    graphs = generated_graphs(gen, model, [(9, 6), (12, 8), (20, 4), (40, 20), (30, 6)])
    assert graphs == [2, 0, 1, 1, 0], graphs  # the first with the decode graph


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tiny_gemma2", "tiny_mistral"])
def test_a_sliding_window_model_s_padded_prefill_answers_eager_s_tokens(kind: str) -> None:
    """Gemma-2 (a dict of masks, one per attention kind) and Mistral (a 4-D mask) through
    ``generate``: prompts within the window of 8 and past it. Before, Gemma-2's dict raised
    AttributeError, Mistral's mask did not fit the padded ids, and a prompt padded past the
    window evicted its own keys from the sliding layers."""
    torch._dynamo.reset()
    model, _ = getattr(models, kind)()
    gen = autotune.apply_generation(model, Strategy.create("full", "aot_eager", buckets="pow2"))
    gen.generation_config.max_cache_len = 64
    graphs = generated_graphs(gen, model, [(5, 4), (10, 4), (20, 4), (7, 4)])
    assert graphs[0] >= 1, graphs


def test_a_cache_that_cannot_be_cut_is_padded_only_within_its_window() -> None:
    """A sliding layer can be cut back only while it never held more than its window: a
    prompt of 5 is padded to 8 (the window), one of 10 not at all (its bucket, 16, is past
    the window); with the Llama's cache, which can always be cut, to its bucket."""
    from transformers import StaticCache

    prefill = importlib.import_module("autotune.strategy.prefill")
    for kind, expected in (("tiny_gemma2", [8, 10]), ("tiny_llama", [8, 16])):
        model, _ = getattr(models, kind)()
        seen: list[int] = []

        def forward(seen: list[int] = seen, model: torch.nn.Module = model,
                    **kwargs: object) -> object:  # fmt: skip
            ids = kwargs["input_ids"]
            seen.append(ids.shape[1])  # type: ignore[attr-defined]
            return model(**kwargs)

        call = prefill.padding(forward, model, "pow2", None)
        for seq in (5, 10):
            cache = StaticCache(config=model.config, max_cache_len=64)
            ids = models.tiny_llama.make_inputs(1, seq)[0]
            with torch.no_grad():
                out = call(input_ids=ids, cache_position=torch.arange(seq), cache=cache,
                           use_cache=True, logits_to_keep=1)  # fmt: skip
            assert out.logits.shape[1] == 1 and cache.get_seq_length() == seq
        assert seen == expected, (kind, seen)


def test_a_padded_prefill_refuses_a_transformers_older_than_it_needs(monkeypatch) -> None:
    """A lent GPU had transformers 5.17; the padded prefill is written against 5.24 (a static
    cache cropped in place by its ``cumulative_length``, the 4-D mask it pads). Below it, a
    generate strategy with buckets is refused in one line, by the search and by
    ``apply_generation``; without buckets the generate workload runs as before."""
    import transformers

    padded = Strategy.create("full", "eager", buckets="pow2")
    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    with pytest.raises(ConfigError, match=r"transformers 5.17.0 is older than the 5.24"):
        padded.check_workload("generate")
    model, _ = models.tiny_llama()
    with pytest.raises(ConfigError, match="--buckets none"):
        autotune.apply_generation(model, padded)
    Strategy.create("full", "eager").check_workload("generate")
    autotune.apply_generation(model, Strategy.create("full", "eager"))
    monkeypatch.setattr(transformers, "__version__", "5.24.0")
    padded.check_workload("generate")
    autotune.apply_generation(model, padded)
