"""Hugging Face models: a preset's exact architecture (:mod:`.presets`) or a local directory's
(its ``config.json``, the class it names), with local weights or with deterministic random
ones made fast (:mod:`.random_weights`), and the random token ids they take.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.catalog.random_weights import materialize, skeleton
from autotune.errors import ConfigError, shorten

if TYPE_CHECKING:
    from autotune.workload import Workload


def make_config(entry: dict[str, Any], layers: int | None) -> Any:
    """The transformers config of a preset entry, with use_cache off, sdpa and ``layers``."""
    import transformers

    config_class = getattr(transformers, entry["config_class"])
    return adjust_config(config_class(**entry["config"], attn_implementation="sdpa"), layers)


def adjust_config(config: Any, layers: int | None) -> Any:
    """Turn the KV cache off and cut the model to ``layers`` blocks. (The attention is asked for
    through transformers' public ``attn_implementation`` argument, where the config or the
    model is made.)"""
    config.use_cache = False
    if layers is not None:
        config.get_text_config().num_hidden_layers = layers
    return config


def random_model(
    model_class: Any, config: Any, seed: int, workload: Workload, attention: str | None = None
) -> Any:
    """Build ``model_class`` from ``config`` with deterministic random weights, fast: an Auto
    class with ``attention``, a model class as its config says (the skeleton sets the dtype)."""
    dtype = workload.torch_dtype
    with skeleton(dtype):
        if hasattr(model_class, "from_config"):  # an Auto class
            model = model_class.from_config(config, dtype=dtype, trust_remote_code=False,
                                            attn_implementation=attention)  # fmt: skip
        else:  # a model class: its config records the dtype, as from_config's does
            config.dtype = dtype
            model = model_class(config)
            if attention:
                model.set_attn_implementation(attention)
    materialize(model, seed, workload.device, dtype)
    return model


def pretrained_model(
    model_class: Any, path: str, config: Any, workload: Workload, attention: str | None = None
) -> Any:
    """Load real weights from the local directory ``path`` (never the hub) into ``config``."""
    extra = {"attn_implementation": attention} if attention else {}
    try:
        model, info = model_class.from_pretrained(
            path,
            config=config,
            dtype=workload.torch_dtype,
            local_files_only=True,
            trust_remote_code=False,
            output_loading_info=True,
            **extra,
        )
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ConfigError(f"cannot load weights from {path}: {one_line(exc)}") from exc
    bad = list(info.get("missing_keys", ())) + [str(k) for k in info.get("mismatched_keys", ())]
    if bad:
        raise ConfigError(
            f"weights in {path} do not fit this architecture: {len(bad)} missing or mismatched "
            f"tensors, e.g. {sorted(bad)[0]}"
        )
    return model.to(workload.device)


def positions(config: Any) -> int | None:
    """The longest input a text model takes (its position embeddings), if it says."""
    text = config.get_text_config()
    return getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)


def input_ids(config: Any, seed: int, workload: Workload) -> Any:
    """Random token ids ``(batch_size, seq_len)`` drawn on the CPU from ``seed``."""
    import torch

    text = config.get_text_config()
    limit = positions(config)
    if limit is not None and workload.seq_len > limit:
        raise ConfigError(f"--seq-len {workload.seq_len} exceeds this model's {limit} positions")
    vocab = getattr(text, "vocab_size", None)
    if not vocab:
        raise ConfigError(f"{type(config).__name__} has no vocab_size: not a text model")
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (workload.batch_size, workload.seq_len), generator=generator)
    return ids.to(workload.device)


def build_preset(
    entry: dict[str, Any], layers: int | None, seed: int, weights: str | None, workload: Workload
) -> tuple[Any, tuple[Any, ...]]:
    """A preset from the table: exact architecture, random weights or local ``weights``."""
    import transformers

    config = make_config(entry, layers)
    model_class = getattr(transformers, entry["model_class"])
    if weights:
        model = pretrained_model(model_class, weights, config, workload)
    else:
        model = random_model(model_class, config, seed, workload)
    return model.eval(), (input_ids(config, seed, workload),)


def load_config(path: str) -> Any:
    """The transformers config in ``path``/config.json (local files only, no remote code)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"cannot read {path}/config.json: {one_line(exc)}") from exc


def named_class(config: Any) -> Any:
    """The transformers model class that ``config.architectures`` names (the class the
    checkpoint was saved from), or None when it names none that transformers has."""
    import transformers

    names = getattr(config, "architectures", None)
    name = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else ""
    found = getattr(transformers, name, None) if name else None
    if isinstance(found, type) and issubclass(found, transformers.PreTrainedModel):
        return found
    return None


def is_causal(config: Any) -> bool:
    """Whether ``config`` is a causal LM that ``--workload generate`` can run: its named class
    (else its ``model_type``'s) is a causal-LM class, and it is a decoder: an encoder family
    that has a causal head too (BERT, RoBERTa, ...) is one only with ``is_decoder`` set."""
    causal_class, decoder = _causal(config)
    return causal_class and decoder


def describe(config: Any) -> str:
    """What a directory's model is, for a message: ``a BertModel``, ``model_type 'vit'``."""
    named = named_class(config)
    what = f"a {named.__name__}" if named is not None else f"model_type {config.model_type!r}"
    causal_class, decoder = _causal(config)
    return what + (" whose config does not set is_decoder" if causal_class and not decoder else "")


def _causal(config: Any) -> tuple[bool, bool]:
    """(a causal-LM class, a decoder): the two halves of :func:`is_causal`."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    named = named_class(config)
    if named is not None:
        causal_class = named.__name__ in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    else:
        causal_class = config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    encoder_family = config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    return causal_class, bool(getattr(config, "is_decoder", False)) or not encoder_family


def directory_class(config: Any) -> Any:
    """The class a directory's model is built as: the one its config names when transformers
    has it, else ``AutoModelForCausalLM`` for a causal LM (:func:`is_causal`), else
    ``AutoModel``."""
    from transformers import AutoModel, AutoModelForCausalLM

    named = named_class(config)
    if named is not None:
        return named
    return AutoModelForCausalLM if is_causal(config) else AutoModel


def build_directory(
    path: str, layers: int | None, seed: int, weights: str | None, workload: Workload
) -> tuple[Any, tuple[Any, ...]]:
    """A local directory with ``config.json``; real weights from ``weights`` or the directory.
    The model is of the class the directory names (:func:`directory_class`)."""
    config = adjust_config(load_config(path), layers)
    model_class = directory_class(config)
    source = weights or (path if has_weights(path) else None)
    for attention in ("sdpa", "eager"):  # sdpa where the architecture has it
        try:
            if source:
                model = pretrained_model(model_class, source, config, workload, attention)
            else:
                model = random_model(model_class, config, seed, workload, attention)
            break
        except (ValueError, ConfigError) as exc:
            if attention == "sdpa" and "scaled_dot_product_attention" in str(exc):
                continue
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"cannot build the model in {path}: {one_line(exc)}") from exc
    return model.eval(), (input_ids(config, seed, workload),)


WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


def has_weights(path: str) -> bool:
    """Whether ``path`` holds a transformers checkpoint (safetensors or pytorch_model*.bin)."""
    from pathlib import Path

    return any(any(Path(path).glob(pattern)) for pattern in WEIGHT_PATTERNS)


def one_line(exc: BaseException) -> str:
    """An exception's message on one short line, for a ConfigError."""
    text = " ".join(str(exc).split())
    return shorten(text, 300) or type(exc).__name__
