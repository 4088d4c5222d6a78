"""The ``continuous-batching`` format: a continuous workload's pick as transformers'
``ContinuousBatchingConfig`` keywords, a ``CompileConfig`` per path, and read back as that object
(:func:`config`, public as :func:`autotune.continuous_batching_config`).

The keywords are exactly what the trial served with
(:func:`autotune.strategy.batching.config_kwargs`, and the KV cache's ``num_blocks`` it
sized for the study's traffic), so that::

    config = autotune.continuous_batching_config("cb.json")
    outputs = model.generate_batch(prompts, continuous_batching_config=config)
    manager = model.init_continuous_batching(continuous_batching_config=config)

serve as measured. ``transformers serve`` carries only some of them as flags (:func:`serve_flags`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.strategy import Strategy, batching

KEY = "continuous_batching_config"


def fields(strategy: Strategy, num_blocks: int | None) -> dict[str, Any]:
    """The keywords of ``ContinuousBatchingConfig`` the strategy was measured with."""
    compiled = batching.compile_config(strategy) if strategy.granularity != "none" else None
    kwargs = batching.config_kwargs(strategy.batching, compiled)
    return {**kwargs, **({"num_blocks": num_blocks} if num_blocks else {})}


def serve_flags(kwargs: dict[str, Any]) -> list[str]:
    """The ``transformers serve --continuous-batching`` flags that carry some of ``kwargs``."""
    flags = {"num_blocks": "--cb-num-blocks", "max_batch_tokens": "--cb-max-batch-tokens"}
    found = [f"{flag} {kwargs[name]}" for name, flag in flags.items() if name in kwargs]
    graphs = kwargs.get("use_cuda_graph")
    if graphs is not None and len(set(graphs)) == 1:
        found.append("--cb-use-cuda-graph" if graphs[0] else "--no-cb-use-cuda-graph")
    return found


def caveats(strategy: Strategy, kwargs: dict[str, Any]) -> list[str]:
    """What this format, and ``transformers serve``'s flags, cannot say."""
    notes = []
    if strategy.granularity not in ("none", "full"):
        notes.append(f"a CompileConfig compiles the whole step: it cannot express granularity "
                     f"{strategy.granularity!r}")  # fmt: skip
    if ":" in strategy.backend:
        notes.append(f"backend {strategy.backend!r} is an import path: pass the function "
                     "itself as each CompileConfig's backend")  # fmt: skip
    carried = serve_flags(kwargs)
    left = [k for k in kwargs if k not in ("num_blocks", "max_batch_tokens", "use_cuda_graph",
                                           "auto_switch_to_flash")]  # fmt: skip
    if left:
        said = f"only {', '.join(carried)}" if carried else "none of it"
        notes.append(f"transformers serve's flags carry {said}; not {', '.join(left)}: serve "
                     "with init_continuous_batching and this config instead")  # fmt: skip
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
