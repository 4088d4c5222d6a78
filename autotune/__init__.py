"""autotune: how should I torch.compile this model, on this machine?

Public API: :class:`Strategy`, :class:`Measurement`, :func:`measure` (one strategy, cold, in a
fresh process), :func:`apply` (compile a model as a strategy or an exported file says),
:func:`apply_generation` (the same, for ``model.generate``) and :func:`load_plugin` (an exported
file as Accelerate's ``TorchDynamoPlugin``).
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import compile as _compile
from autotune.errors import AutotuneError, ConfigError, NotApplicable
from autotune.measurement import Measurement
from autotune.runner import measure
from autotune.strategy import Strategy
from autotune.workload import Settings, Workload

if TYPE_CHECKING:
    import torch


def apply(model: torch.nn.Module, how: Strategy | str | Path) -> torch.nn.Module:
    """Compile ``model`` as a :class:`Strategy` or an exported file (``best.json``) says.

    Every granularity is honoured, ``nested`` included, which Accelerate cannot express. An
    exported file's cache artefact (``best.cache.bin``) is loaded first when it fits this
    machine, so the first call starts warm; otherwise one warning line says why, and the
    compile goes on cold.
    """
    from autotune import artifact, export

    if isinstance(how, Strategy):
        return _compile.apply(model, how)
    strategy, data = export.read(how)
    artifact.prepare(data, how)
    return _compile.apply(model, strategy)


def apply_generation(model: torch.nn.Module, how: Strategy | str | Path) -> torch.nn.Module:
    """A model sharing ``model``'s parameters whose ``generate(...)`` runs the strategy of ``how``.

    ``how`` is a :class:`Strategy` or an exported file (any format, ``transformers`` included).
    Prefill and decode run the compiled forward at its granularity (regional and nested too)
    with a static KV cache, as autotune measured them; ``model`` itself is left as it was.
    """
    from autotune import export

    strategy = how if isinstance(how, Strategy) else export.read(how)[0]
    gen = _compile.generator(model, strategy)
    if gen is model:  # eager: a copy still, so that the generation config below is its own
        gen = _compile.shallow_copy(model)
    config = copy.deepcopy(model.generation_config)
    config.cache_implementation = "static"
    config.disable_compile = True  # compiled here as measured, not a second time by transformers
    gen.generation_config = config
    return gen


def load_plugin(path: str | Path) -> Any:
    """An exported file as ``accelerate.utils.TorchDynamoPlugin`` (warns where it approximates)."""
    from accelerate.utils import TorchDynamoPlugin

    from autotune import export

    strategy, _ = export.read(path)
    if caveat := strategy.accelerate_caveat():
        warnings.warn(f"{caveat}; the plugin compiles it as granularity 'full'", stacklevel=2)
    return TorchDynamoPlugin(**export.accelerate_fields(strategy))


__all__ = [
    "AutotuneError",
    "ConfigError",
    "Measurement",
    "NotApplicable",
    "Settings",
    "Strategy",
    "Workload",
    "apply",
    "apply_generation",
    "load_plugin",
    "measure",
]
