"""A local checkpoint is built as its own class (``config.architectures``), and is causal only
when its config says so: a BERT encoder is a BertModel, not a BERT with a language-model head."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from autotune.catalog import ModelRef, build, check, hf
from autotune.errors import ConfigError
from autotune.strategy import Strategy
from autotune.trial.parent import Settings, measure
from autotune.workload import Workload
from tests.models import TINY_LLAMA

ROOT = Path(__file__).resolve().parents[2]
F32 = Workload(dtype="float32", seq_len=8)
GEN = Workload(batch_size=1, seq_len=8, kind="generate", new_tokens=3)


def bert_config(**extra: Any) -> transformers.BertConfig:
    return transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                   intermediate_size=64, vocab_size=100,
                                   max_position_embeddings=64, **extra)  # fmt: skip


def saved(model_class: Any, config: Any, path: Path) -> torch.nn.Module:
    """``model_class(config)`` with seeded random weights, saved into ``path``."""
    with torch.random.fork_rng():
        torch.manual_seed(3)
        model = model_class(config).eval()
    model.save_pretrained(path)
    return model


def test_bert_encoder_checkpoint_is_measured_as_bert_model(tmp_path: Path) -> None:
    encoder = saved(transformers.BertModel, bert_config(), tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertModel"]
    model, inputs = build(ModelRef(str(tmp_path)), F32)
    assert type(model) is transformers.BertModel  # not BertLMHeadModel
    assert torch.equal(model.embeddings.word_embeddings.weight,
                       encoder.embeddings.word_embeddings.weight)  # fmt: skip
    mine, theirs = model.state_dict(), encoder.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[name], theirs[name]) for name in mine)
    with torch.no_grad():
        assert torch.isfinite(model(*inputs).last_hidden_state).all()
    check(ModelRef(str(tmp_path)), F32)  # measured as it is
    with pytest.raises(ConfigError, match=r"causal language model, and .* is a BertModel$"):
        check(ModelRef(str(tmp_path)), GEN)


def test_generate_on_a_bert_encoder_is_refused_in_one_line_by_the_cli(tmp_path: Path) -> None:
    saved(transformers.BertModel, bert_config(), tmp_path / "bert")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "measure", "--model", str(tmp_path / "bert"),
         "--workload", "generate", "--seq-len", "8", "--new-tokens", "3"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "--workload generate needs a causal language model" in lines[0]
    assert "is a BertModel" in lines[0]


def test_named_class_is_built_with_random_weights_without_a_checkpoint(tmp_path: Path) -> None:
    config = bert_config(num_labels=3)
    config.architectures = ["BertForSequenceClassification"]
    config.save_pretrained(tmp_path)  # a config only: random weights
    model, inputs = build(ModelRef(str(tmp_path)), F32)
    assert type(model) is transformers.BertForSequenceClassification
    with torch.no_grad():
        assert model(*inputs).logits.shape == (1, 3)
    again, _ = build(ModelRef(str(tmp_path)), F32)
    assert torch.equal(model.classifier.weight, again.classifier.weight)  # deterministic


@pytest.mark.parametrize(
    ("config", "architectures", "built", "causal"),
    [
        (bert_config(), ["BertModel"], "BertModel", False),
        (bert_config(), None, "BertModel", False),  # a config saved alone: AutoModel
        (bert_config(is_decoder=True), ["BertLMHeadModel"], "BertLMHeadModel", True),
        (bert_config(is_decoder=True), None, "BertLMHeadModel", True),  # says it is a decoder
        (bert_config(), ["BertLMHeadModel"], "BertLMHeadModel", False),  # is_decoder unset
        (bert_config(), ["NoSuchModelInTransformers"], "BertModel", False),  # falls back
        (transformers.LlamaConfig(**TINY_LLAMA), ["LlamaForCausalLM"], "LlamaForCausalLM", True),
        (transformers.LlamaConfig(**TINY_LLAMA), None, "LlamaForCausalLM", True),
        (transformers.LlamaConfig(**TINY_LLAMA), ["LlamaModel"], "LlamaModel", False),
        (transformers.LlamaConfig(**TINY_LLAMA), ["LlamaConfig"], "LlamaForCausalLM", True),
    ],
)
def test_the_class_and_causality_come_from_what_the_config_says(
    config: Any, architectures: list[str] | None, built: str, causal: bool
) -> None:
    config.architectures = architectures
    model_class = hf.directory_class(config)
    assert model_class.__name__ in (built, "AutoModel", "AutoModelForCausalLM")
    auto = hasattr(model_class, "from_config")  # an Auto class picks by model_type
    model = model_class.from_config(config) if auto else model_class(config)
    assert type(model).__name__ == built
    assert hf.is_causal(config) is causal


def test_a_refusal_says_what_the_directory_is() -> None:
    head = bert_config()
    head.architectures = ["BertLMHeadModel"]
    assert hf.describe(head) == "a BertLMHeadModel whose config does not set is_decoder"
    head.is_decoder = True
    assert hf.describe(head) == "a BertLMHeadModel"
    assert hf.describe(transformers.ViTConfig()) == "model_type 'vit'"


def test_llama_checkpoint_is_still_causal_and_generates(tmp_path: Path) -> None:
    config = transformers.LlamaConfig(**TINY_LLAMA)
    llama = saved(transformers.LlamaForCausalLM, config, tmp_path)
    model, _ = build(ModelRef(str(tmp_path)), F32)
    assert type(model) is transformers.LlamaForCausalLM
    assert torch.equal(model.lm_head.weight, llama.lm_head.weight)
    check(ModelRef(str(tmp_path)), GEN)
    m = measure(ModelRef(str(tmp_path)), GEN, Strategy.create("full", "eager"),
                Settings(iters=2, warmup=1, timeout_s=300))  # fmt: skip
    assert m.status == "ok", m.reason + m.log_tail
    assert m.tokens and m.tokens.passed and m.tokens.tokens == 3
