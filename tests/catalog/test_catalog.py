"""autotune.catalog: presets, local directories, user functions, fast deterministic builds."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.catalog import ModelRef, build, check, presets
from autotune.catalog.toy import Layer, Toy
from autotune.errors import ConfigError
from autotune.workload import Workload

# a module-scoped fixture is built once: every test that shares it runs on one xdist worker
pytestmark = pytest.mark.xdist_group("catalog")

ROOT = Path(__file__).resolve().parents[2]
BF16 = Workload(dtype="bfloat16", seq_len=8)
F32 = Workload(dtype="float32", seq_len=8)


def logits(model: torch.nn.Module, inputs: tuple) -> torch.Tensor:
    with torch.no_grad():
        out = model(*inputs)
    return out if isinstance(out, torch.Tensor) else out.logits


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    return all(torch.equal(x, y) for x, y in pairs)


@pytest.fixture(scope="module")
def gemma() -> tuple[torch.nn.Module, tuple]:
    return build(ModelRef("gemma-2b", layers=2), BF16)


# ModelRef ------------------------------------------------------------------------------------


def test_model_ref_form_and_round_trip() -> None:
    ref = ModelRef("gemma-2b", layers=2, seed=3, weights="/ckpt/gemma")
    assert ModelRef.from_dict(ref.to_dict()) == ref
    assert ModelRef("gemma-2b").slug() == "gemma-2b"
    assert ModelRef("gemma-2b", layers=2).slug() == "gemma-2b-l2"
    assert ModelRef("mypkg.mod:fn").slug() == "mypkg.mod-fn"
    assert ModelRef("./models/tiny gpt/").slug() == "tiny-gpt"
    assert "/" not in ref.slug() and ref.slug() != ModelRef("gemma-2b", layers=2).slug()
    for bad in ({"name": ""}, {"name": "gpt2", "layers": 0}, {"name": "gpt2", "seed": "1"}):
        with pytest.raises(ConfigError):
            ModelRef(**bad)


def test_presets_listing() -> None:
    listed = presets()
    assert set(listed) == {"toy-64", "gemma-2b", "llama-3.2-1b", "gpt2"}
    assert "ignored" in listed["toy-64"] and all(listed.values())


def test_check_imports_no_torch() -> None:
    code = (
        "import sys; from autotune.catalog import ModelRef, check; "
        "check(ModelRef('gemma-2b', layers=2)); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# errors --------------------------------------------------------------------------------------


def test_unknown_model_lists_known_names() -> None:
    with pytest.raises(ConfigError) as info:
        check(ModelRef("gemma-7b"))
    message = str(info.value)
    assert "\n" not in message
    for name in ("toy-64", "gemma-2b", "llama-3.2-1b", "gpt2", "config.json", "module:function"):
        assert name in message


def test_weights_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such directory"):
        check(ModelRef("gpt2", weights=str(tmp_path / "missing")))
    with pytest.raises(ConfigError, match="safetensors"):
        check(ModelRef("gpt2", weights=str(tmp_path)))
    with pytest.raises(ConfigError, match="layers"):
        check(ModelRef("gemma-2b", layers=19))


def test_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config\.json"):
        check(ModelRef(str(tmp_path)))


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("no_such_module_xyz:make", "no module named"),
        ("usermods_err:missing", "has no 'missing'"),
        ("usermods_err:NOT_CALLABLE", "not callable"),
        ("usermods_err:", "package.module:function"),
    ],
)
def test_bad_function_model(
    name: str, match: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "usermods_err.py").write_text("NOT_CALLABLE = 3\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "usermods_err", raising=False)
    with pytest.raises(ConfigError, match=match):
        check(ModelRef(name))


def test_function_model_wrong_return(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "usermods_wrong.py").write_text("def make():\n    return 'a model'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(ConfigError, match="must return"):
        build(ModelRef("usermods_wrong:make"), F32)


# toy -----------------------------------------------------------------------------------------


def test_toy_is_the_recipe_model() -> None:
    state = torch.random.get_rng_state()
    model, inputs = build(ModelRef("toy-64"), F32)
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched
    assert isinstance(model, Toy) and isinstance(model.layers, torch.nn.ModuleList)
    assert len(model.layers) == 64 and all(type(layer) is Layer for layer in model.layers)
    assert not model.training
    assert len(inputs) == 1 and inputs[0].shape == (10, 10)
    out = model(*inputs)
    assert out.shape == (10, 10) and torch.isfinite(out).all()
    assert Toy.__module__ == "autotune.catalog.toy"


def test_toy_determinism_and_layers() -> None:
    a, xa = build(ModelRef("toy-64"), F32)
    b, xb = build(ModelRef("toy-64"), F32)
    c, xc = build(ModelRef("toy-64", seed=1), F32)
    assert same_weights(a, b) and torch.equal(xa[0], xb[0])
    assert not same_weights(a, c) and not torch.equal(xa[0], xc[0])
    short, _ = build(ModelRef("toy-64", layers=3), Workload(dtype="bfloat16", batch_size=7))
    assert len(short.layers) == 3 and short.linear.weight.dtype == torch.bfloat16


# gemma ---------------------------------------------------------------------------------------


def test_gemma_config_is_exact(gemma: tuple) -> None:
    from autotune.catalog.hf import make_config
    from autotune.catalog.presets import PRESETS

    assert make_config(PRESETS["gemma-2b"], None).num_hidden_layers == 18
    model, _ = gemma
    c = model.config
    assert (c.hidden_size, c.intermediate_size, c.num_attention_heads) == (2048, 16384, 8)
    assert (c.num_key_value_heads, c.head_dim, c.vocab_size) == (1, 256, 256000)
    assert (c.hidden_act, c.max_position_embeddings, c.rms_norm_eps) == (
        "gelu_pytorch_tanh",
        8192,
        1e-6,
    )
    assert c.rope_parameters["rope_theta"] == 10000.0 and c.tie_word_embeddings
    assert c.use_cache is False and c._attn_implementation == "sdpa"
    assert c.num_hidden_layers == 2 and len(model.model.layers) == 2


def test_gemma_buffers_ties_and_norms(gemma: tuple) -> None:
    from transformers.models.gemma.modeling_gemma import GemmaRotaryEmbedding

    model, _ = gemma
    rotary = model.model.rotary_emb
    reference = GemmaRotaryEmbedding(model.config)
    assert torch.equal(rotary.inv_freq, reference.inv_freq)
    assert torch.equal(rotary.original_inv_freq, reference.inv_freq)
    embed = model.model.embed_tokens
    assert embed.embed_scale.item() == torch.tensor(math.sqrt(2048), dtype=torch.bfloat16).item()
    assert model.lm_head.weight is embed.weight
    assert not any(p.is_meta for p in model.parameters())
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert torch.count_nonzero(model.model.norm.weight) == 0  # Gemma's norm scales by 1 + w
    assert torch.count_nonzero(embed.weight[0]) == 0  # padding row, as transformers does
    weight = model.model.layers[0].mlp.down_proj.weight.float()
    assert 0.015 < weight.std().item() < 0.025 and abs(weight.mean().item()) < 1e-3


def test_gemma_forward_and_determinism(gemma: tuple) -> None:
    model, inputs = gemma
    (ids,) = inputs
    assert ids.shape == (1, 8) and ids.dtype == torch.long
    out = logits(model, inputs)
    assert out.shape == (1, 8, 256000) and torch.isfinite(out).all()
    again, again_inputs = build(ModelRef("gemma-2b", layers=1), BF16)
    assert torch.equal(again_inputs[0], ids)
    layer, other = model.model.layers[0], again.model.layers[0]
    assert torch.equal(layer.self_attn.q_proj.weight, other.self_attn.q_proj.weight)
    assert torch.equal(model.model.embed_tokens.weight, again.model.embed_tokens.weight)
    assert not torch.equal(layer.self_attn.q_proj.weight, layer.self_attn.o_proj.weight.T)
    del again
    seeded, _ = build(ModelRef("gemma-2b", layers=1, seed=5), BF16)
    assert not torch.equal(layer.mlp.up_proj.weight, seeded.model.layers[0].mlp.up_proj.weight)


# llama and gpt2 ------------------------------------------------------------------------------


def test_llama() -> None:
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    model, inputs = build(ModelRef("llama-3.2-1b", layers=1), BF16)
    c = model.config
    assert (c.hidden_size, c.intermediate_size, c.num_attention_heads) == (2048, 8192, 32)
    assert (c.num_key_value_heads, c.head_dim, c.vocab_size) == (8, 64, 128256)
    assert (c.rms_norm_eps, c.max_position_embeddings, c.tie_word_embeddings) == (
        1e-5,
        131072,
        True,
    )
    rope = c.rope_parameters
    assert (rope["rope_type"], rope["rope_theta"], rope["factor"]) == ("llama3", 500000.0, 32.0)
    assert (rope["low_freq_factor"], rope["high_freq_factor"]) == (1.0, 4.0)
    assert rope["original_max_position_embeddings"] == 8192
    assert len(model.model.layers) == 1 and c._attn_implementation == "sdpa"
    assert next(model.parameters()).dtype == torch.bfloat16 and c.dtype == torch.bfloat16
    assert torch.equal(model.model.rotary_emb.inv_freq, LlamaRotaryEmbedding(c).inv_freq)
    assert torch.all(model.model.norm.weight == 1)  # Llama's RMSNorm starts at ones
    assert model.lm_head.weight is model.model.embed_tokens.weight
    out = logits(model, inputs)
    assert out.shape == (1, 8, 128256) and torch.isfinite(out).all()


def test_gpt2() -> None:
    model, inputs = build(ModelRef("gpt2", layers=1), F32)
    c = model.config
    assert (c.n_embd, c.n_head, c.vocab_size, c.n_positions, c.n_layer) == (
        768,
        12,
        50257,
        1024,
        1,
    )
    assert len(model.transformer.h) == 1 and not model.training
    assert model.lm_head.weight is model.transformer.wte.weight
    block = model.transformer.h[0]
    assert torch.all(block.ln_1.weight == 1) and torch.count_nonzero(block.attn.c_attn.bias) == 0
    out = logits(model, inputs)
    assert out.shape == (1, 8, 50257) and torch.isfinite(out).all()
    with pytest.raises(ConfigError, match="positions"):
        build(ModelRef("gpt2", layers=1), Workload(seq_len=2048))


def test_gpt2_preset_with_weights(tmp_path: Path) -> None:
    saved, _ = build(ModelRef("gpt2", layers=1, seed=9), F32)
    saved.save_pretrained(tmp_path)
    loaded, _ = build(ModelRef("gpt2", layers=1, weights=str(tmp_path)), F32)
    fresh, _ = build(ModelRef("gpt2", layers=1), F32)
    assert same_weights(loaded, saved) and not same_weights(loaded, fresh)
    assert loaded.lm_head.weight is loaded.transformer.wte.weight


# local directories ---------------------------------------------------------------------------


def tiny_gpt2_config() -> Any:
    from transformers import GPT2Config

    return GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=100,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
    )


def test_directory_with_config_only(tmp_path: Path) -> None:
    tiny_gpt2_config().save_pretrained(tmp_path)
    model, inputs = build(ModelRef(str(tmp_path)), F32)
    assert type(model).__name__ == "GPT2LMHeadModel" and len(model.transformer.h) == 2
    assert model.config.use_cache is False
    assert model.config._attn_implementation == "sdpa"  # asked for by the public argument
    assert inputs[0].shape == (1, 8) and int(inputs[0].max()) < 100
    assert torch.isfinite(logits(model, inputs)).all()
    again, _ = build(ModelRef(str(tmp_path)), F32)
    assert same_weights(model, again)
    short, _ = build(ModelRef(str(tmp_path), layers=1), F32)
    assert len(short.transformer.h) == 1


def test_directory_with_weights(tmp_path: Path) -> None:
    from transformers import GPT2LMHeadModel

    with torch.random.fork_rng():
        torch.manual_seed(1)
        saved = GPT2LMHeadModel(tiny_gpt2_config())
    saved.save_pretrained(tmp_path)
    model, inputs = build(ModelRef(str(tmp_path)), F32)
    assert same_weights(model, saved) and model.config._attn_implementation == "sdpa"
    assert torch.isfinite(logits(model, inputs)).all()
    with pytest.raises(ConfigError, match="cannot load weights"):
        build(ModelRef("gpt2", layers=1, weights=str(tmp_path)), F32)


def test_directory_not_a_causal_lm(tmp_path: Path) -> None:
    from transformers import DistilBertConfig

    DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=64, vocab_size=100).save_pretrained(
        tmp_path
    )
    model, inputs = build(ModelRef(str(tmp_path)), F32)
    assert type(model).__name__ == "DistilBertModel"
    with torch.no_grad():
        assert torch.isfinite(model(*inputs).last_hidden_state).all()


# user functions ------------------------------------------------------------------------------

USER_MODULE = """
import torch



def make():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Dropout(0.5))
    return model, torch.randn(2, 4)


def make_pair():
    return torch.nn.Linear(4, 3), (torch.randn(2, 4), torch.arange(3))
"""


def test_function_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "usermods_ok.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    check(ModelRef("usermods_ok:make"))
    model, inputs = build(ModelRef("usermods_ok:make"), BF16)
    assert not model.training and model[0].weight.dtype == torch.bfloat16
    assert isinstance(inputs, tuple) and len(inputs) == 1 and inputs[0].dtype == torch.bfloat16
    assert model(*inputs).shape == (2, 3)
    again, again_inputs = build(ModelRef("usermods_ok:make"), BF16)
    assert same_weights(model, again) and torch.equal(inputs[0], again_inputs[0])
    _, pair = build(ModelRef("usermods_ok:make_pair"), BF16)
    assert pair[0].dtype == torch.bfloat16 and pair[1].dtype == torch.long
    with pytest.raises(ConfigError, match="do not apply"):
        check(ModelRef("usermods_ok:make", layers=2))
