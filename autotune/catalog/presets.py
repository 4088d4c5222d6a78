"""The preset table: a plain dict from name to architecture, like gpt-fast's transformer_configs.

Every Hugging Face entry holds the ``config.json`` values of the real checkpoint, so the
architecture is exact and nothing is ever downloaded (transformers 5 folds ``rope_theta`` and
``rope_scaling`` into ``config.rope_parameters``). Gemma's checkpoint says ``hidden_act: gelu``,
which transformers reads as ``gelu_pytorch_tanh``; that is spelled out here.
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "toy-64": {
        "about": "PyTorch regional-compilation recipe toy: Linear + 64 blocks of 10x10 Linears; "
        "input is one 10x10 tensor (batch size and sequence length are ignored)",
        "kind": "toy",
        "layers": 64,
    },
    "gemma-2b": {
        "about": "Gemma-2B (2.5B params, 18 layers, hidden 2048, MQA, vocab 256000), "
        "random weights",
        "kind": "hf",
        "config_class": "GemmaConfig",
        "model_class": "GemmaForCausalLM",
        "config": {
            "architectures": ["GemmaForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 2,
            "eos_token_id": 1,
            "pad_token_id": 0,
            "head_dim": 256,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": 2048,
            "initializer_range": 0.02,
            "intermediate_size": 16384,
            "max_position_embeddings": 8192,
            "num_attention_heads": 8,
            "num_hidden_layers": 18,
            "num_key_value_heads": 1,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 10000.0,
            "tie_word_embeddings": True,
            "vocab_size": 256000,
        },
    },
    "llama-3.2-1b": {
        "about": "Llama-3.2-1B (1.2B params, 16 layers, hidden 2048, GQA 32/8, vocab 128256, "
        "llama3 RoPE), random weights",
        "kind": "hf",
        "config_class": "LlamaConfig",
        "model_class": "LlamaForCausalLM",
        "config": {
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 128000,
            "eos_token_id": 128001,
            "head_dim": 64,
            "hidden_act": "silu",
            "hidden_size": 2048,
            "initializer_range": 0.02,
            "intermediate_size": 8192,
            "max_position_embeddings": 131072,
            "mlp_bias": False,
            "num_attention_heads": 32,
            "num_hidden_layers": 16,
            "num_key_value_heads": 8,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-05,
            "rope_scaling": {
                "factor": 32.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
            "rope_theta": 500000.0,
            "tie_word_embeddings": True,
            "vocab_size": 128256,
        },
    },
    "gpt2": {
        "about": "GPT-2 small (124M params, 12 layers, n_embd 768, 12 heads, vocab 50257, "
        "1024 positions), random weights",
        "kind": "hf",
        "config_class": "GPT2Config",
        "model_class": "GPT2LMHeadModel",
        "config": {
            "architectures": ["GPT2LMHeadModel"],
            "activation_function": "gelu_new",
            "attn_pdrop": 0.1,
            "bos_token_id": 50256,
            "embd_pdrop": 0.1,
            "eos_token_id": 50256,
            "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-05,
            "n_ctx": 1024,
            "n_embd": 768,
            "n_head": 12,
            "n_layer": 12,
            "n_positions": 1024,
            "resid_pdrop": 0.1,
            "tie_word_embeddings": True,
            "vocab_size": 50257,
        },
    },
}


def presets() -> dict[str, str]:
    """Preset name -> one-line description, for ``autotune models``."""
    return {name: entry["about"] for name, entry in PRESETS.items()}


def preset_layers(name: str) -> int:
    """The number of repeated blocks (decoder layers) of a preset at full size."""
    entry = PRESETS[name]
    if entry["kind"] == "toy":
        return int(entry["layers"])
    config = entry["config"]
    return int(config.get("num_hidden_layers", config.get("n_layer", 0)))
