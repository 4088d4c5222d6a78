"""A model to measure (:class:`ModelRef`): a preset, a local transformers directory, or a
user's function. ``check`` validates one cheaply in the parent process; ``build`` makes the model
and its example inputs, deterministically, in whichever process measures it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.catalog.presets import PRESETS, preset_layers
from autotune.errors import ConfigError
from autotune.fields import option

if TYPE_CHECKING:
    import torch

    from autotune.workload import Workload

ACCEPTED = "a local directory with a config.json, or package.module:function"


@dataclass(frozen=True)
class ModelRef:
    """A model to measure: a preset name, a local directory, or ``package.module:function``."""

    name: str = option(None, "a preset, a directory with a config.json, or module:function",
                       flag="--model")  # fmt: skip
    layers: int | None = option(None, "shorten a preset to N repeated blocks", cli_type=int)
    seed: int = option(0, "seed of the random weights and inputs", cli_type=int)
    weights: str | None = option(None, "a local directory holding the model's real weights")

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError("the model name is empty: give a preset, a directory or module:fn")
        if self.layers is not None and (not _is_int(self.layers) or self.layers < 1):
            raise ConfigError(f"--layers must be a whole number >= 1, got {self.layers!r}")
        if not _is_int(self.seed):
            raise ConfigError(f"--seed must be a whole number, got {self.seed!r}")
        if self.weights is not None and (not isinstance(self.weights, str) or not self.weights):
            raise ConfigError("--weights must name a local directory")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelRef:
        return cls(**data)

    def slug(self) -> str:
        """A filesystem-safe readable name: ``gemma-2b``, ``gemma-2b-l2``, ``mypkg.mod-fn``."""
        parts = [_safe(self.name)]
        if self.layers is not None:
            parts.append(f"l{self.layers}")
        if self.seed:
            parts.append(f"s{self.seed}")
        if self.weights:
            parts.append(f"w-{_safe(self.weights)}")
        return "-".join(parts)


def kind(name: str) -> str:
    """``preset``, ``directory``, ``function`` or ``unknown``; a preset name wins over a folder."""
    if name in PRESETS:
        return "preset"
    if os.path.isdir(name):
        return "directory"
    if ":" in name:
        return "function"
    return "unknown"


def check(ref: ModelRef, workload: Workload | None = None) -> None:
    """Raise ConfigError (one line) if ``ref`` cannot be built (or cannot run ``workload``)."""
    _check(ref)
    if workload is not None and workload.kind == "generate":
        check_generate(ref)
    if workload is not None and workload.traffic:
        check_traffic(ref, workload)
    elif workload is not None and workload.kind == "generate":
        check_positions(ref, workload, [(workload.seq_len, int(workload.new_tokens))])


SHAPED = "make_inputs"  # a function model's maker of inputs at a shape, for a traffic


def check_traffic(ref: ModelRef, workload: Workload) -> None:
    """Raise ConfigError unless ``ref`` takes inputs of every shape of the traffic: a
    transformers model (token ids, within its positions), or a function model with a
    ``make_inputs(batch_size, seq_len)`` attribute."""
    from autotune.catalog import user

    found = kind(ref.name)
    if found == "function":
        if not callable(getattr(user.resolve(ref.name), SHAPED, None)):
            raise ConfigError(f"a traffic needs inputs of many shapes: give {ref.name} a "
                              f"{SHAPED}(batch_size, seq_len) attribute")  # fmt: skip
        return
    if found == "preset" and PRESETS[ref.name]["kind"] == "toy":
        raise ConfigError(f"{ref.name}'s input is always one 10x10 tensor: a traffic of shapes "
                          "does not apply")  # fmt: skip
    answers = workload.answers or (0,) * len(workload.traffic)
    check_positions(ref, workload, [(seq, new) for (_, seq), new in
                                    zip(workload.traffic, answers, strict=False)])  # fmt: skip


def check_positions(ref: ModelRef, workload: Workload, requests: list[tuple[int, int]]) -> None:
    """Raise ConfigError where a request's prompt, and for a generate workload its answer too,
    runs past the positions the config of ``ref`` (a preset or a directory) gives its model:
    its embedding would fail there, after the trials before it had run."""
    from autotune.catalog import hf

    found = kind(ref.name)
    if found == "function":
        return
    config = hf.make_config(PRESETS[ref.name], None) if found == "preset" else (
        hf.load_config(ref.name))  # fmt: skip
    limit = hf.positions(config)
    generate = workload.kind == "generate"
    for n, (seq, new) in enumerate(requests, 1):
        if limit is None or seq + (new if generate else 0) <= limit:
            continue
        where = f"traffic request {n}" if workload.traffic else "the request"
        if generate and seq <= limit:
            raise ConfigError(f"{where}: seq_len {seq} and new_tokens {new} make {seq + new} "
                              f"positions, past {ref.name}'s {limit}")  # fmt: skip
        raise ConfigError(f"{where}: seq_len {seq} exceeds {ref.name}'s {limit} positions")


def inputs_at(ref: ModelRef, model: Any, workload: Workload, shape: tuple[int, int]) -> tuple:
    """The inputs of one traffic shape, drawn as a trial's are (same seed)."""
    import torch

    from autotune.catalog import hf, user

    at = workload.at(shape)
    if kind(ref.name) == "function":
        with torch.random.fork_rng(devices=[]):  # the same inputs in every process
            torch.manual_seed(ref.seed)
            made = getattr(user.resolve(ref.name), SHAPED)(*shape)
        return user.move(made if isinstance(made, tuple) else (made,), at)
    return (hf.input_ids(model.config, ref.seed, at),)


GENERATE_FLAG = "supports_generate"
CAUSAL_CLASSES = ("ForCausalLM", "LMHeadModel")


def check_generate(ref: ModelRef) -> None:
    """Raise ConfigError unless ``ref`` is a causal LM that ``--workload generate`` can run.

    Presets and directories qualify by architecture (a transformers causal-LM class; for a
    directory, the class its config names, and a decoder: :func:`autotune.catalog.hf.is_causal`); a
    ``module:function`` model declares it with ``function.supports_generate = True`` and returns a
    transformers-style causal LM (``cache`` or ``past_key_values``, ``cache_position``,
    ``.logits``).
    """
    from autotune.catalog import user

    found = kind(ref.name)
    if found == "preset":
        entry = PRESETS[ref.name]
        causal = entry["kind"] == "hf" and entry["model_class"].endswith(CAUSAL_CLASSES)
        what = entry.get("model_class", "a toy model")
    elif found == "directory":
        from autotune.catalog import hf

        config = hf.load_config(ref.name)
        causal, what = hf.is_causal(config), hf.describe(config)
    else:
        causal = bool(getattr(user.resolve(ref.name), GENERATE_FLAG, False))
        what = f"a function without {GENERATE_FLAG} = True"
    if not causal:
        raise ConfigError(
            f"--workload generate needs a causal language model, and {ref.name} is {what}"
        )


def _check(ref: ModelRef) -> None:
    from autotune.catalog import hf, user

    found = kind(ref.name)
    if found == "unknown" and os.sep in ref.name:
        raise ConfigError(f"model directory {ref.name} does not exist")
    if found == "unknown":
        raise ConfigError(
            f"unknown model {ref.name!r}: use a preset ({', '.join(PRESETS)}), {ACCEPTED}"
        )
    if found == "function":
        if ref.layers is not None or ref.weights is not None:
            raise ConfigError(
                f"--layers and --weights do not apply to a function model ({ref.name})"
            )
        user.resolve(ref.name)
        return
    if found == "preset":
        full = preset_layers(ref.name)
        if PRESETS[ref.name]["kind"] == "toy" and ref.weights is not None:
            raise ConfigError(f"--weights does not apply to {ref.name}: it has no checkpoint")
    else:
        full = _directory_layers(ref.name)
    if ref.layers is not None and full and ref.layers > full:
        raise ConfigError(f"{ref.name} has {full} layers: --layers must be 1 to {full}")
    if ref.weights is not None:
        if not os.path.isdir(ref.weights):
            raise ConfigError(f"--weights {ref.weights}: no such directory")
        if not hf.has_weights(ref.weights):
            raise ConfigError(
                f"--weights {ref.weights}: no *.safetensors or pytorch_model*.bin files there"
            )


def build(ref: ModelRef, workload: Workload) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """Make ``(model, example_inputs)`` for ``workload``: on its device and dtype, in eval mode.

    Same ``ref`` and ``workload`` give bit-identical weights and inputs.
    """
    check(ref, workload)
    found = kind(ref.name)
    if found == "function":
        from autotune.catalog.user import build_user

        return build_user(ref.name, ref.seed, workload)
    if found == "directory":
        from autotune.catalog.hf import build_directory

        return build_directory(ref.name, ref.layers, ref.seed, ref.weights, workload)
    entry = PRESETS[ref.name]
    if entry["kind"] == "toy":
        from autotune.catalog.toy import build_toy

        return build_toy(ref.layers or entry["layers"], ref.seed, workload)
    from autotune.catalog.hf import build_preset

    return build_preset(entry, ref.layers, ref.seed, ref.weights, workload)


def _directory_layers(path: str) -> int:
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise ConfigError(f"model directory {path} has no config.json")
    try:
        with open(config_path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {config_path}: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigError(f"{config_path} is not a JSON object")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    layers = text.get("num_hidden_layers", text.get("n_layer"))
    return layers if _is_int(layers) else 0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _safe(text: str) -> str:
    base = os.path.basename(os.path.normpath(text))
    if base in ("", ".", ".."):
        base = os.path.basename(os.path.abspath(text)) or "model"
    return re.sub(r"[^A-Za-z0-9._]+", "-", base).strip("-.") or "model"
