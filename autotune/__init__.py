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

from autotune.errors import AutotuneError, ConfigError, NotApplicable
from autotune.ship import exported as use
from autotune.ship.exported import AutotuneWarning, Backends
from autotune.strategy import granularity as _compile
from autotune.strategy.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.trial.parent import measure
from autotune.workload import Settings, Workload

if TYPE_CHECKING:
    import torch


def apply(
    model: torch.nn.Module, how: Strategy | str | Path, *, backends: Backends = None,
    trust_artifact: bool | None = None,
) -> torch.nn.Module:  # fmt: skip
    """Compile ``model`` as a :class:`Strategy` or an exported file (``best.json``) says.

    Every granularity is honoured, ``nested`` included, which Accelerate cannot express.
    A file is data: a ``package.module:function`` backend it names is used only when you pass
    it (``backends={name: fn}``) or allow its import by name (``backends=[name]``). Its
    artefacts run code when loaded, so they are loaded only when you trust them
    (``trust_artifact=True``, or ``$AUTOTUNE_TRUST_ARTIFACTS=1``) and they fit this machine: a
    precompiled function or an AOTInductor package (``best.precompiled.bin``,
    ``best.aot.pt2``) replaces the compile, else the cache artefact (``best.cache.bin``) warms
    it; otherwise one warning line says why, and the compile goes on cold.
    """
    from autotune.ship import export
    from autotune.starts import artifact

    if isinstance(how, Strategy):
        return _compile.apply(model, how)
    strategy, data = export.read(how)
    fitted = use.fitted(strategy, data, how)
    if fitted is None:
        return model
    resolve = use.resolver(backends, how)
    if fitted.granularity != "none":
        fitted.compile_kwargs(resolve)  # refuse unpassed code before anything is loaded
    if (started := use.load_ahead(model, data, how, trust_artifact)) is not None:
        return started  # a precompiled function or an AOTInductor package: no compile at all
    loaded = artifact.prepare(data, how, trust_artifact)
    compiled = _compile.apply(model, fitted, resolve)
    return use.warn_on_miss(compiled, f"the cache artefact of {how}") if loaded else compiled


def apply_generation(
    model: torch.nn.Module, how: Strategy | str | Path, *, backends: Backends = None
) -> torch.nn.Module:
    """A model sharing ``model``'s parameters whose ``generate(...)`` runs the strategy of ``how``.

    ``how`` is a :class:`Strategy` or an exported file (any format, ``transformers`` included;
    code it names is handled as by :func:`apply`). Prefill and decode run the compiled forward
    at its granularity (regional and nested too) with a static KV cache, as autotune measured
    them; ``model`` itself is left as it was.
    """
    from autotune import usercode as code
    from autotune.ship import export

    if not callable(getattr(model, "generate", None)) or not hasattr(model, "generation_config"):
        raise ConfigError(
            "apply_generation needs a transformers model that generates (with "
            f"generate and a generation_config): {type(model).__name__} is not"
        )
    if isinstance(how, Strategy):
        strategy, resolve = how, code.resolve
    else:
        strategy, data = export.read(how)
        strategy = use.fitted(strategy, data, how) or Strategy("none")
        resolve = use.resolver(backends, how)
    gen = _compile.generator(model, strategy, resolve)
    if gen is model:  # eager: a copy still, so that the generation config below is its own
        gen = _compile.shallow_copy(model)
    config = copy.deepcopy(model.generation_config)
    config.cache_implementation = "static"
    config.disable_compile = True  # compiled here as measured, not a second time by transformers
    gen.generation_config = config
    return gen


def load_plugin(path: str | Path) -> Any:
    """An exported file as ``accelerate.utils.TorchDynamoPlugin`` (warns where it approximates:
    ``nested`` becomes one full compile)."""
    from accelerate.utils import TorchDynamoPlugin

    from autotune import usercode as code
    from autotune.ship import export

    strategy, _ = export.read(path)
    if code.is_code(strategy.backend):
        raise ConfigError(
            f"{path} names backend {strategy.backend!r}, which Accelerate's "
            "TorchDynamoPlugin cannot take (only a registered backend's name): use "
            "autotune.apply(model, file, backends=...)"
        )
    if caveat := strategy.accelerate_caveat():
        warnings.warn(f"{caveat}; the plugin compiles it as granularity 'full'",
                      AutotuneWarning, stacklevel=2)  # fmt: skip
    return TorchDynamoPlugin(**export.accelerate_fields(strategy))


__all__ = [
    "AutotuneError",
    "AutotuneWarning",
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
