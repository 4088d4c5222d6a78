"""The ``continuous-batching`` format: a continuous workload's pick as transformers'
``ContinuousBatchingConfig`` keywords, a ``CompileConfig`` per path, and read back as that object
(:func:`config`, public as :func:`autotune.continuous_batching_config`).

The keywords are exactly what the trial served with
(:func:`autotune.strategy.batching.config_kwargs`, and the KV cache's ``num_blocks`` it
sized for the study's traffic), so that::

    config = autotune.continuous_batching_config("cb.json")
    outputs = model.generate_batch(prompts, continuous_batching_config=config)
    manager = model.init_continuous_batching(continuous_batching_config=config)

serve as measured. ``transformers serve`` carries only some of them as flags (:data:`FLAGS`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.strategy import Strategy, batching

KEY = "continuous_batching_config"
# the keywords a ``transformers serve --continuous-batching`` flag carries (its --cb-* flags;
# one use_cuda_graph for both paths)
FLAGS = {"num_blocks": "--cb-num-blocks", "max_batch_tokens": "--cb-max-batch-tokens",
         "use_cuda_graph": "--cb-use-cuda-graph"}  # fmt: skip


def fields(strategy: Strategy, num_blocks: int | None) -> dict[str, Any]:
    """The keywords of ``ContinuousBatchingConfig`` the strategy was measured with."""
    compiled = batching.compile_config(strategy) if strategy.granularity != "none" else None
    try:
        kwargs = batching.config_kwargs(strategy.batching, compiled, strategy.edges)
    except ValueError as exc:  # pad=auto, stored without the intervals its trial chose
        raise ConfigError(str(exc)) from None
    return {**kwargs, **({"num_blocks": num_blocks} if num_blocks else {})}


def caveats(strategy: Strategy) -> list[str]:
    """What this format, and ``transformers serve``'s flags, cannot say about the strategy's
    keywords (the export always sizes the cache: ``num_blocks`` is among them)."""
    kwargs = fields(strategy, num_blocks=1)
    one_graph_flag = len(set(kwargs.get("use_cuda_graph") or ())) == 1  # both paths alike
    carried = [k for k in FLAGS if k in kwargs and (k != "use_cuda_graph" or one_graph_flag)]
    left = [k for k in kwargs if k != "auto_switch_to_flash" and k not in carried]
    notes = []
    if ":" in strategy.backend:
        notes.append(f"backend {strategy.backend!r} is an import path: pass the function "
                     "itself as each CompileConfig's backend")  # fmt: skip
    if left:
        said = ", ".join(f"{k} ({FLAGS[k]})" for k in carried)
        notes.append(f"transformers serve's flags carry only {said}; not "
                     f"{', '.join(left)}: serve with init_continuous_batching and this config "
                     "instead")  # fmt: skip
    return notes


def render(strategy: Strategy, block: dict[str, Any]) -> dict[str, Any]:
    """The document: the keywords, and autotune's block."""
    served = block.get("continuous") if isinstance(block.get("continuous"), dict) else {}
    return {KEY: fields(strategy, served.get("num_blocks")), "autotune": block}


def config(path: str | Path) -> Any:
    """An exported ``continuous-batching`` file as transformers' ``ContinuousBatchingConfig``
    (each path's ``CompileConfig`` an object). ``ConfigError`` for a file of another format."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    kwargs = data.get(KEY) if isinstance(data, dict) else None
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{path} holds no {KEY}: export with --format continuous-batching")
    try:
        return batching.config_object(kwargs)
    except TypeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
