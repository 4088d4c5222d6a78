"""Buckets and marks as a deployment meets them (autotune/strategy/shapes.py, padding.py): every
bucket compiles past torch's recompile limit, and the applied model takes what transformers
users pass (keywords, masks, positions, token types, labels, a KV cache)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

import autotune
from autotune.ship.export import export
from autotune.storage import Store
from autotune.strategy import Strategy, granularity, shapes
from autotune.workload import Workload
from tests import models
from tests.helpers import point

BUCKETED = Strategy.create("full", "eager", dynamic=False, buckets="pow2")


def fresh() -> None:
    """Dynamo as in a new process: no compiled code, no counts."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


def graphs() -> int:
    """Graphs dynamo compiled since :func:`fresh`."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def llama(layers: int = 2) -> torch.nn.Module:
    """The tests' tiny Llama (``layers`` of them: one compiles quicker)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        **{**models.TINY_LLAMA, "num_hidden_layers": layers, "max_position_embeddings": 512}
    )
    config._attn_implementation = "sdpa"
    return transformers.LlamaForCausalLM(config).eval()


def request(batch: int = 3, seq: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and a mask that hides the first row's first two (left padding by the user)."""
    torch.manual_seed(1)
    ids = torch.randint(0, models.TINY_LLAMA["vocab_size"], (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, :2] = 0
    return ids, mask


def served(model: torch.nn.Module, strategy: Strategy = BUCKETED) -> Any:
    fresh()
    return autotune.apply(model, strategy)


def test_the_limit_counts_the_buckets_the_traffics_range_makes() -> None:
    wide = [(1, 16), (3, 100), (8, 512)]  # pow2 1,2,4,8 x 16,...,512
    assert shapes.count("pow2", wide) == 4 * 6
    assert shapes.count("pow2", [(1, 2), (4, 512)]) == 3 * 9
    assert shapes.count("quantiles", [(1, 10), (1, 20), (2, 30), (2, 40)]) == 2 * 4
    assert shapes.recompile_limit("pow2", wide) == 24
    assert shapes.recompile_limit("pow2", [(1, 16), (2, 32)]) == 8  # never below torch's
    assert shapes.recompile_limit("none", wide) is None
    assert shapes.up_to(45, (10, 20, 30, 40)) == 64  # past the last edge: a power of two


def test_a_pre_warmed_time_to_ready_compiles_the_buckets_the_traffic_did_not_hit() -> None:
    """48 requests of 1..8 x 16..512 fall in 19 of the 24 pow2 buckets: a deployment that
    pre-warms compiles all 24, not the sum of the 19 stalls the trial measured."""
    from autotune.trial.scenarios.traffic_trial import prewarmed

    requests = Workload(batch_size="1..8", seq_len="16..512", requests=48).traffic
    assert (shapes.hit("pow2", requests), shapes.count("pow2", requests)) == (19, 24)
    assert prewarmed("pow2", requests, 19.0) == {"prewarmed_s": 24.0, "buckets": [19, 24]}
    edges = (1, 3, 8), (16, 64, 512)
    assert shapes.bucket_of((2, 70), edges) == (3, 512)
    assert prewarmed("none", requests, 5.0) == {"prewarmed_s": 5.0}  # every shape: the sum


@pytest.mark.slow
def test_every_bucket_compiles_past_torchs_recompile_limit() -> None:
    model = llama(layers=1)
    traffic = [(1, 2), (4, 512)]  # 3 x 9 pow2 buckets
    fresh()

    compiled = granularity.apply(model, BUCKETED, traffic=traffic)
    lengths = (2, 3, 5, 9, 17, 33, 65, 129)  # 8 buckets at batch 1, then one at batch 4
    quick = {"use_cache": False}  # (a cache in the graph: twice the compile time)
    with torch.no_grad():
        for n in lengths:
            compiled(torch.randint(0, 64, (1, n)), **quick)
        ids = torch.randint(0, 64, (3, 300))
        out = compiled(ids, **quick)
        assert graphs() == 9  # every bucket compiled, none ran eager (torch's limit: 8)
        compiled(torch.randint(0, 64, (1, 100)), **quick)  # a bucket met before: no compile
        assert graphs() == 9
        expected = model(ids, **quick).logits
        torch.testing.assert_close(out.logits, expected, atol=1e-4, rtol=1e-4)
    assert compiled.recompile_limit >= 27
    assert torch._dynamo.config.recompile_limit == 8  # scoped to the model's calls


@pytest.mark.slow
def test_a_regional_compile_compiles_every_bucket_in_every_block() -> None:
    model = llama(layers=2)  # each block its own graph per bucket: 2 per bucket for one code
    fresh()
    regional = Strategy.create("regional", "eager", dynamic=False, buckets="pow2")
    compiled = granularity.apply(model, regional, traffic=[(1, 2), (1, 32)])
    with torch.no_grad():
        compiled(torch.randint(0, 64, (1, 2)), use_cache=False)
        each = graphs()
        for n in (3, 5, 9, 17):  # buckets 4..32: 10 graphs of the block's code past 8
            compiled(torch.randint(0, 64, (1, n)), use_cache=False)
    assert graphs() == 5 * each


def test_a_length_past_the_largest_quantile_pads_to_its_power_of_two() -> None:
    model = llama(layers=1)
    fresh()

    quartiles = Strategy.create("full", "eager", dynamic=False, buckets="quantiles")
    compiled = granularity.apply(model, quartiles, traffic=[(1, 10), (1, 20), (1, 30), (1, 40)])
    with torch.no_grad():
        first = compiled(torch.randint(0, 64, (1, 45)), use_cache=False)
        compiled(torch.randint(0, 64, (1, 50)), use_cache=False)  # 64 too: one compile
    assert graphs() == 1 and first.logits.shape[:2] == (1, 45)


def test_an_export_carries_the_limit_and_apply_sets_it(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/l.db")
    w = Workload(batch_size="1..8", seq_len="16..512", requests=16)
    store.add_study("l", {"model": {"name": "toy-64"}, "workload": w.to_dict()}, {})
    store.add_measurement("l", BUCKETED.key, 0, point(BUCKETED, 0.0, 1.0))
    path, _, _ = export(store, "l", "fastest", "accelerate", str(tmp_path / "l.json"))
    data = json.loads(path.read_text())
    limit = data["autotune"]["recompile_limit"]
    assert limit == shapes.count("pow2", w.traffic) > 8
    assert autotune.apply(llama(), path).recompile_limit == limit
    data["autotune"]["recompile_limit"] = 100  # the file's word, where it says more
    path.write_text(json.dumps(data))
    assert autotune.apply(llama(), path).recompile_limit == 100


def test_a_call_by_keyword_with_a_mask_is_padded_and_cut_back() -> None:
    model = llama()
    ids, mask = request()
    with torch.no_grad():
        out = served(model)(input_ids=ids, attention_mask=mask)
        expected = model(input_ids=ids, attention_mask=mask)
    assert out.logits.shape[:2] == (3, 5)
    torch.testing.assert_close(out.logits, expected.logits, atol=1e-5, rtol=1e-5)


def test_position_ids_are_padded_by_keyword_and_by_position() -> None:
    model = llama()
    ids, mask = request()
    positions = torch.arange(4, 9).expand(3, 5)  # a continuation: they do not start at 0
    shaped = served(model)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        by_keyword = shaped(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        by_position = shaped(ids, mask, positions).logits
    torch.testing.assert_close(by_keyword, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(by_position, expected, atol=1e-5, rtol=1e-5)


def test_token_type_ids_are_padded() -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100,
                                     bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    ids, mask = request()
    ids = ids % 100
    types = torch.randint(0, 2, ids.shape)
    with torch.no_grad():
        out = served(model)(input_ids=ids, attention_mask=mask, token_type_ids=types)
        expected = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(out.logits, expected.logits, atol=1e-5, rtol=1e-5)


def test_a_kv_cache_is_cut_back_to_the_request() -> None:
    model = llama()
    ids, mask = request()
    with torch.no_grad():
        out = served(model)(ids, attention_mask=mask, use_cache=True)
        expected = model(ids, attention_mask=mask, use_cache=True)
        assert out.cache.get_seq_length() == 5
        for mine, theirs in zip(out.cache.layers, expected.cache.layers, strict=True):
            assert mine.keys.shape == theirs.keys.shape == (3, 2, 5, 16)
            torch.testing.assert_close(mine.values, theirs.values, atol=1e-5, rtol=1e-5)
        step = torch.randint(0, 64, (3, 1))  # the next token, eager, from either cache
        longer = torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], dim=1)
        decoded = model(step, attention_mask=longer, cache=out.cache).logits
        torch.testing.assert_close(
            decoded, model(step, attention_mask=longer, cache=expected.cache).logits,
            atol=1e-5, rtol=1e-5,
        )  # fmt: skip


def test_labels_give_the_unpadded_loss() -> None:
    model = llama()
    ids, _ = request()
    with torch.no_grad():
        loss = served(model)(ids, labels=ids, use_cache=False).loss
        torch.testing.assert_close(loss, model(ids, labels=ids, use_cache=False).loss)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"extra_states": torch.zeros(3, 5)}, "cannot pad keyword 'extra_states'"),
        ({"logits_to_keep": 1}, "logits_to_keep"),
        ({"attention_mask": torch.ones(3, 1, 5, 5)}, "4-D attention_mask"),
    ],
)
def test_what_cannot_be_padded_is_refused_in_one_line(extra: dict, needle: str) -> None:
    ids, _ = request()
    with pytest.raises(autotune.NotApplicable, match=needle) as info:
        served(llama())(input_ids=ids, **extra)
    assert "\n" not in str(info.value)


def test_a_past_kv_cache_is_refused_in_one_line() -> None:
    model = llama()
    ids, mask = request()
    with torch.no_grad():
        past = model(ids, attention_mask=mask, use_cache=True).cache
    with pytest.raises(autotune.NotApplicable, match="KV cache passed in") as info:
        served(model)(input_ids=ids[:, -1:], cache=past)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_marks_mark_the_users_mask_too() -> None:
    model = llama()
    shaped = served(model, Strategy.create("full", "eager", marks="seq"))
    with torch.no_grad():
        for n in (5, 9, 17):
            ids, mask = request(2, n)
            out = shaped(ids, attention_mask=mask)
            torch.testing.assert_close(out.logits, model(ids, attention_mask=mask).logits,
                                       atol=1e-5, rtol=1e-5)  # fmt: skip
    assert graphs() == 1  # one dynamic graph, as measured; not static then dynamic


class Pooled(torch.nn.Module):
    """A pooled classifier: a masked mean over positions, then a head. A padded row's mask
    hides every position, so its mean is 0 / 0: NaN."""

    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.head = torch.nn.Embedding(100, hidden), torch.nn.Linear(hidden, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict:
        h = self.emb(input_ids) * attention_mask[..., None]
        pooled = h.sum(1) / attention_mask.sum(1, keepdim=True)
        return {"logits": self.head(pooled), "pooler_output": pooled, "hidden": h}


def test_a_pooled_classifier_gets_its_own_rows_back_and_no_nan() -> None:
    """Three requests in a batch pad to a bucket of four: the classifier's logits came back
    (4, 2), the fourth row NaN. Every output carrying the padded batch is cut back."""
    model = Pooled()
    ids = torch.randint(0, 100, (3, 10))
    mask = torch.ones_like(ids)
    expected = model(ids, mask)
    served = autotune.apply(model, Strategy.create("full", "eager", buckets="pow2", dynamic=False))
    out = served(input_ids=ids, attention_mask=mask)
    assert out["logits"].shape == (3, 2) and not torch.isnan(out["logits"]).any()
    assert torch.allclose(out["logits"], expected["logits"])
    assert out["pooler_output"].shape == (3, 16)  # a pooled vector: its 16 are not positions
    assert out["hidden"].shape == (3, 10, 16)


def test_an_output_whose_positions_cannot_be_told_from_features_is_refused() -> None:
    """A 2-D output whose second dimension is the bucket's length could be one score per
    position or a feature vector of that size: refused in one line, never cut at a guess."""

    class Bare(Pooled):
        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict:
            return {"features": super().forward(input_ids, attention_mask)["pooler_output"]}

    served = autotune.apply(Bare(), Strategy.create("full", "eager", buckets="pow2",
                                                    dynamic=False))  # fmt: skip
    ids = torch.randint(0, 100, (3, 10))
    with pytest.raises(autotune.errors.NotApplicable, match="positions or features"):
        served(input_ids=ids, attention_mask=torch.ones_like(ids))
