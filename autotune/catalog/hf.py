"""Hugging Face models built fast: a skeleton without init, then weights copied from a random pool.

transformers' default init draws every weight with ``normal_`` (over 30 s for Gemma-2B in bf16 on
a small CPU). Here parameters are created on the meta device while buffers (rotary ``inv_freq``,
Gemma's ``embed_scale``, ...) are computed for real by the model's own ``__init__``. Then every
parameter is allocated once in the target dtype and filled by copying windows of one seeded pool
of normal samples, so the weights are deterministic, finite and cost about one memory copy.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError, shorten

if TYPE_CHECKING:
    import torch

    from autotune.workload import Workload

# Odd, so windows of the pool do not repeat in step with power-of-two row widths.
POOL_SIZE = 4_194_301


@contextmanager
def skeleton(dtype: torch.dtype) -> Iterator[None]:
    """Create parameters on the meta device (no init cost) and buffers for real, in ``dtype``."""
    import torch

    original = torch.nn.Module.register_parameter

    def register(module: torch.nn.Module, name: str, param: Any) -> None:
        original(module, name, param)
        if param is not None and param.device.type != "meta":  # tying re-registers meta params
            meta = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
            module._parameters[name] = meta

    previous = torch.get_default_dtype()
    torch.nn.Module.register_parameter = register  # type: ignore[method-assign]
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]
        torch.set_default_dtype(previous)


class Pool:
    """Seeded normal samples on the device; a tensor is filled with windows picked by its name."""

    def __init__(self, seed: int, device: str, dtype: torch.dtype) -> None:
        import torch

        generator = torch.Generator().manual_seed(seed)
        # Drawn on the CPU so every device sees the same values; float32 only for the pool itself.
        self.base = torch.randn(POOL_SIZE, generator=generator).to(device)
        self.dtype = dtype
        self.scaled: dict[float, torch.Tensor] = {}

    def fill(self, tensor: torch.Tensor, name: str, std: float) -> None:
        """Fill ``tensor`` in place with N(0, std) values, deterministic in (seed, name)."""
        import torch

        if std not in self.scaled:
            window = (self.base * std).to(self.dtype)
            self.scaled[std] = torch.cat((window, window))  # any window of POOL_SIZE is contiguous
        pool = self.scaled[std]
        flat = tensor.view(-1)
        for chunk, start in enumerate(range(0, flat.numel(), POOL_SIZE)):
            size = min(POOL_SIZE, flat.numel() - start)
            offset = zlib.crc32(f"{name}#{chunk}".encode()) % POOL_SIZE
            flat[start : start + size].copy_(pool[offset : offset + size])


def materialize(model: torch.nn.Module, seed: int, device: str, dtype: torch.dtype) -> None:
    """Give every meta parameter real storage on ``device`` and a sane deterministic value.

    Matrices and embeddings get N(0, initializer_range); biases zeros; other vectors (norms) ones,
    then the model's own ``_init_weights`` on modules holding only vectors (Gemma's RMSNorm ->
    zeros). Shared (tied) parameters stay one object. Buffers keep the values ``__init__`` made.
    """
    import torch

    config = getattr(model, "config", None)
    std = float(getattr(config, "initializer_range", None) or 0.02)
    pool = Pool(seed, device, dtype)
    done: dict[int, torch.nn.Parameter] = {}
    vectors_only: list[torch.nn.Module] = []
    with torch.no_grad():
        for module_name, module in model.named_modules():
            own = [(name, p) for name, p in module._parameters.items() if p is not None]
            for name, param in own:
                if id(param) not in done:
                    full = f"{module_name}.{name}" if module_name else name
                    done[id(param)] = _make(param, full, name, pool, std, device, dtype)
                module._parameters[name] = done[id(param)]
            padding = getattr(module, "padding_idx", None)
            if isinstance(module, torch.nn.Embedding) and padding is not None:
                module.weight[padding].zero_()
            if own and all(param.dim() < 2 for _, param in own):
                vectors_only.append(module)
        own_init = getattr(model, "_init_weights", None)
        if own_init is not None and vectors_only:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                for module in vectors_only:
                    own_init(module)
    model.to(device)  # buffers were computed on the CPU


def _make(
    param: torch.Tensor,
    full: str,
    name: str,
    pool: Pool,
    std: float,
    device: str,
    dtype: torch.dtype,
) -> torch.nn.Parameter:
    import torch

    data = torch.empty(param.shape, device=device, dtype=_dtype(param, dtype))
    if not data.is_floating_point():
        data.zero_()
    elif data.dim() >= 2:
        pool.fill(data, full, std)
    elif name == "bias":
        data.zero_()
    else:
        data.fill_(1.0)
    return torch.nn.Parameter(data, requires_grad=param.requires_grad)


def _dtype(param: torch.Tensor, dtype: torch.dtype) -> torch.dtype:
    return dtype if param.is_floating_point() else param.dtype


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
