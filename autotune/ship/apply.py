"""Using the answer: compile a model as a :class:`~autotune.strategy.strategy.Strategy` or an
exported file says (:func:`apply`, :func:`apply_generation`), or hand the file to Accelerate
(:func:`load_plugin`).

A file is data: a ``package.module:function`` backend it names is used only when the caller
passes it or allows its import by name (:mod:`autotune.usercode`). Its artefacts run code when
loaded, so they are loaded only when the caller trusts them and they fit this machine; otherwise
one warning line says why, and the compile goes on cold. Nothing here changes the caller's
model or their process's environment.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import usercode
from autotune.errors import AutotuneWarning, ConfigError
from autotune.ship import exported, formats
from autotune.ship.exported import Backends
from autotune.starts import artifact
from autotune.strategy import Strategy, granularity, kv_cache
from autotune.strategy.shapes import Shaped

if TYPE_CHECKING:
    import torch


def apply(
    model: torch.nn.Module, how: Strategy | str | Path, *, backends: Backends = None,
    trust_artifact: bool | None = None,
) -> torch.nn.Module:  # fmt: skip
    """Compile ``model`` as a :class:`Strategy` or an exported file (``best.json``) says.

    Every granularity is honoured, ``nested`` included, which Accelerate cannot express, and a
    strategy measured over a traffic is served as measured: padded to its buckets (quantile
    buckets from the file's traffic) under the file's ``recompile_limit``, so that each bucket
    compiles, its dimensions marked, under its stance; called by position or by keyword
    (``input_ids=..., attention_mask=...``), outputs and a KV cache cut back to the request.
    A ``package.module:function`` backend the file names is used only when you pass it
    (``backends={name: fn}``) or allow its import by name (``backends=[name]``). Its
    artefacts are loaded only when you trust them (``trust_artifact=True``, or
    ``$AUTOTUNE_TRUST_ARTIFACTS=1``) and they fit this machine: a precompiled function or an
    AOTInductor package (``best.precompiled.bin``, ``best.aot.pt2``) replaces the compile, else
    the cache artefact (``best.cache.bin``) warms it; otherwise one warning line says why, and
    the compile goes on cold.
    """
    if isinstance(how, Strategy):
        return granularity.apply(model, how)
    with artifact.environ_kept():  # torch's loaders set TORCHINDUCTOR_CACHE_DIR where unset
        return _apply_file(model, how, backends, trust_artifact)


def _apply_file(
    model: torch.nn.Module, how: str | Path, backends: Backends, trust_artifact: bool | None
) -> torch.nn.Module:
    strategy, data = exported.read(how)
    fitted = exported.fitted(strategy, data, how)
    if fitted is None:
        return model
    resolve = exported.resolver(backends, how)
    if fitted.granularity != "none":
        fitted.compile_kwargs(resolve)  # refuse unpassed code before anything is loaded
    started, failed = exported.load_ahead(model, data, how, trust_artifact)
    if started is not None:
        return started  # a precompiled function or an AOTInductor package: no compile at all
    loaded = artifact.prepare(data, how, trust_artifact)
    workload = (data.get("autotune") or {}).get("workload") or {}
    compiled = granularity.apply(model, fitted, resolve, workload.get("traffic") or ())
    limit = (data.get("autotune") or {}).get("recompile_limit")
    if isinstance(compiled, Shaped) and isinstance(limit, int):
        compiled.limit_recompiles(limit)  # every bucket compiles, as in the trial
    if failed or loaded is None:  # a load that failed: what it wrote stays out of the compile
        return artifact.isolate(compiled)
    return exported.warn_on_miss(compiled, f"the cache artefact of {how}") if loaded else compiled


def apply_generation(
    model: torch.nn.Module, how: Strategy | str | Path, *, backends: Backends = None,
    trust_artifact: bool | None = None,
) -> torch.nn.Module:  # fmt: skip
    """A model sharing ``model``'s parameters whose ``generate(...)`` runs the strategy of ``how``.

    ``how`` is a :class:`Strategy` or an exported file (any format, ``transformers`` included;
    code and the cache artefact it names are handled as by :func:`apply`). Prefill and decode
    run the compiled forward at its granularity (regional and nested too), the prefill eager
    where the strategy says ``prefill="eager"``, with a static KV cache as long as the file's
    study measured (``max_cache_len``: its longest prompt plus answer; a longer request gets
    a longer cache, as transformers allocates it, and compiles its decode again), as autotune
    measured them; ``model`` itself is left as it was.
    """
    if not callable(getattr(model, "generate", None)) or not hasattr(model, "generation_config"):
        raise ConfigError(
            "apply_generation needs a transformers model that generates (with "
            f"generate and a generation_config): {type(model).__name__} is not"
        )
    with artifact.environ_kept():
        return _generator(model, how, backends, trust_artifact)


def _generator(
    model: torch.nn.Module, how: Strategy | str | Path, backends: Backends,
    trust_artifact: bool | None,
) -> torch.nn.Module:  # fmt: skip
    loaded: bool | None = False
    length = None  # the static cache's length, where a file says what it was measured with
    found = None  # ...and a quantiles kv_cache's lengths
    traffic: Any = ()
    if isinstance(how, Strategy):
        strategy, resolve = how, usercode.resolve
    else:
        strategy, data = exported.read(how)
        block = data.get("autotune") if isinstance(data.get("autotune"), dict) else {}
        length, found = formats.cache_length(block), formats.cache_edges(block)
        traffic = (block.get("workload") or {}).get("traffic") or ()  # quantile buckets' edges
        strategy = exported.fitted(strategy, data, how) or Strategy("none")
        resolve = exported.resolver(backends, how)
        if strategy.granularity != "none":
            strategy.compile_kwargs(resolve)  # refuse unpassed code before anything is loaded
            loaded = artifact.prepare(data, how, trust_artifact)
    gen = granularity.generator(model, strategy, resolve, traffic)
    if gen is model:  # eager: a copy still, so that the generation config below is its own
        gen = granularity.shallow_copy(model)
    config = copy.deepcopy(model.generation_config)
    config.cache_implementation = "static"
    config.use_cache = True  # as measured: a model whose config turns the cache off gets one
    config.disable_compile = True  # compiled here as measured, not a second time by transformers
    if length is not None:  # one cache for every request, as measured (never a shorter one)
        config.max_cache_len = max(length, getattr(config, "max_cache_len", None) or 0)
    # one cache a batch size and length (a bucket's, or the single one), made once and reset in
    # place: transformers makes a new one at every call, whose new addresses a CUDA graph
    # records again
    gen.generate = kv_cache.serving(gen, strategy, length or 0, found, traffic)
    gen.generation_config = config
    return artifact.isolate(gen, "generate") if loaded is None else gen


def load_plugin(path: str | Path) -> Any:
    """An exported file as ``accelerate.utils.TorchDynamoPlugin`` (warns where it approximates:
    ``nested`` becomes one full compile)."""
    from accelerate.utils import TorchDynamoPlugin

    strategy, _ = exported.read(path)
    if usercode.is_code(strategy.backend):
        raise ConfigError(
            f"{path} names backend {strategy.backend!r}, which Accelerate's "
            "TorchDynamoPlugin cannot take (only a registered backend's name): use "
            "autotune.apply(model, file, backends=...)"
        )
    if caveat := formats.accelerate_caveat(strategy):
        warnings.warn(f"{caveat}; the plugin compiles it as granularity 'full'",
                      AutotuneWarning, stacklevel=2)  # fmt: skip
    return TorchDynamoPlugin(**formats.accelerate_fields(strategy))


def generation_config(path: str | Path, base: Any = None) -> Any:
    """An exported file as transformers' ``GenerationConfig`` (``base``'s, the model's own,
    with the file's fields over it), its ``compile_config`` a ``CompileConfig``: what
    ``model.generate(..., generation_config=...)`` takes. A file of any JSON format: the
    strategy it names, in transformers' fields (a static KV cache; a ``package.module:function``
    backend stays its name: pass the function as ``compile_config.backend``)."""
    import transformers

    strategy, data = exported.read(path)
    fields = data.get("generation_config")
    if not isinstance(fields, dict):
        block = data.get("autotune") if isinstance(data.get("autotune"), dict) else {}
        fields = formats.transformers_fields(strategy, formats.cache_length(block))
    compile_config = fields.get("compile_config")
    if isinstance(compile_config, dict):
        fields = {**fields, "compile_config": transformers.CompileConfig(**compile_config)}
    config = copy.deepcopy(base) if base is not None else transformers.GenerationConfig()
    config.update(**fields)
    return config


def continuous_batching_config(path: str | Path) -> Any:
    """An exported ``continuous-batching`` file as transformers' ``ContinuousBatchingConfig``:
    what ``model.generate_batch(..., continuous_batching_config=...)`` and
    ``model.init_continuous_batching(continuous_batching_config=...)`` take, as measured."""
    from autotune.ship import continuous_batching

    return continuous_batching.config(path)
