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


def test_a_padded_prefill_compiles_one_graph_a_bucket_and_answers_eager_s_tokens() -> None:
    torch._dynamo.reset()
    model, _ = models.tiny_llama()
    gen = autotune.apply_generation(model, Strategy.create("full", "aot_eager", buckets="pow2"))
    gen.generation_config.max_cache_len = 80
    # buckets 16, 16, 32, 64, 32
    graphs = generated_graphs(gen, model, [(9, 6), (12, 8), (20, 4), (40, 20), (30, 6)])
    assert graphs == [2, 0, 1, 1, 0], graphs  # the first with the decode graph
