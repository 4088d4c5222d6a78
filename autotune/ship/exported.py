"""Using an exported file here: the strategy it names (:func:`read`), what of it fits this
machine, and how the code it names is found. A file is data: it never makes autotune import
code its user did not pass or allow (:mod:`autotune.usercode`), and what does not fit gets one
warning line, not a traceback.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneWarning, CacheWarning, ConfigError
from autotune.ship import formats
from autotune.strategy import Strategy

Backends = Mapping[str, Callable[..., Any]] | Iterable[str] | None


def read(path: str | Path) -> tuple[Strategy, dict[str, Any]]:
    """The strategy an exported JSON file names (exact, nested included), and its fields."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"no such file: {path}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not an autotune JSON export: {exc}") from None
    return formats.strategy_of(data), data


def resolver(backends: Backends, path: str | Path) -> Callable[[str, str], Any]:
    """How a ``package.module:function`` backend named in an exported file is found: the
    callable the caller passed, or an import the caller allowed by name; never otherwise."""
    from autotune import usercode

    def resolve(name: str, what: str) -> Any:
        if isinstance(backends, Mapping) and name in backends:
            return backends[name]
        names = (
            list(backends) if backends is not None and not isinstance(backends, Mapping) else []
        )
        if usercode.allowed(name, names):
            return usercode.resolve(name, what)
        raise ConfigError(
            f"{path} names backend {name!r}, which is code: pass it "
            f"(backends={{{name!r}: fn}}) or allow its import (backends=[{name!r}])"
        )

    return resolve


def fitted(strategy: Strategy, data: dict[str, Any], path: str | Path) -> Strategy | None:
    """The strategy as it can compile here, with one warning line for whatever does not fit
    (another torch or machine, an unknown mode); None when it cannot compile here at all."""
    import dataclasses

    from autotune import usercode
    from autotune.environment import fingerprint
    from autotune.strategy import registered_backends
    from autotune.strategy.inductor import inductor_modes

    block = data.get("autotune") if isinstance(data.get("autotune"), dict) else {}
    made = block.get("environment") if isinstance(block.get("environment"), dict) else {}
    here = fingerprint("cpu")
    for key in ("torch", "cpu"):
        if made.get(key) and made[key] != here[key]:
            warnings.warn(
                f"{path} was measured with {key} {made[key]}, this is {here[key]}: "
                "its numbers may not hold here",
                AutotuneWarning,
                stacklevel=4,
            )
            break
    if strategy.granularity == "none" or usercode.is_code(strategy.backend):
        return strategy
    if strategy.backend not in registered_backends():
        warnings.warn(
            f"{path} names backend {strategy.backend!r}, which this torch does "
            "not have: the model is returned uncompiled",
            AutotuneWarning,
            stacklevel=4,
        )
        return None
    if strategy.mode is not None and strategy.mode not in inductor_modes():
        warnings.warn(
            f"{path} names mode {strategy.mode!r}, which this torch does not "
            "have: compiling with mode 'default'",
            AutotuneWarning,
            stacklevel=4,
        )
        return dataclasses.replace(strategy, mode="default")
    return strategy


def warn_on_miss(module: Any, name: str) -> Any:
    """After ``module``'s first call, say in one line if the artefact that was loaded did not
    hit the FX graph cache (made on another device index, or for another graph): that first
    call compiled cold."""
    from autotune.starts import later

    before = later.cache_counters()

    def after(*_: Any) -> None:
        handle.remove()
        now = later.cache_counters()
        hits = now["fxgraph_cache_hit"] - before["fxgraph_cache_hit"]
        misses = now["fxgraph_cache_miss"] - before["fxgraph_cache_miss"]
        if misses and not hits:
            warnings.warn(f"{name} was loaded, but the first call missed the FX graph cache "
                          f"({misses} misses): it compiled cold (made on another device index, "
                          "or for another graph?)", AutotuneWarning, stacklevel=2)  # fmt: skip

    handle = module.register_forward_hook(after)
    return module


def load_ahead(
    model: Any, data: dict[str, Any], path: str | Path, trust: bool | None
) -> tuple[Any, bool]:
    """The model as a zero-compile start (a precompiled function or an AOTInductor package the
    export ships), when the caller trusts it and it fits; else None, with one line why (the
    compile then goes on as usual), and whether a load failed (the compile should then be
    isolated from what it wrote)."""
    from autotune.starts import artifact, precompiled

    block = data.get("autotune") if isinstance(data.get("autotune"), dict) else {}
    shipped = artifact.precompiled_blocks(block)
    if not shipped:
        return None, False
    wanted = [o for o in block.get("objectives") or [] if o in shipped]
    kind = next(iter(wanted + [k for k in ("aot", "precompiled") if k in shipped]))
    if not artifact.trusted(trust):
        return None, False  # artifact.prepare says so, for every artefact the file ships
    payload, why = artifact.check(shipped[kind], Path(path))
    failed = False
    if payload is not None:
        try:
            with artifact.environ_kept():
                fn = precompiled.load(
                    kind, str(Path(path).with_name(shipped[kind]["file"])), model
                )
        except Exception as exc:  # a file torch refuses: the compile goes on
            why, failed = f"{kind} artefact failed to load ({type(exc).__name__})", True
        else:
            return _checked(precompiled.Precompiled(model, fn, kind)), False
    warnings.warn(f"{why}: compiling as usual", CacheWarning, stacklevel=3)
    return None, failed


def _checked(module: Any) -> Any:
    """After the first call, say in one line if Dynamo compiled anything (the artefact's
    guards did not hold, so it did not skip the compiler)."""
    from autotune.starts import precompiled

    before = precompiled.frames_compiled()
    call = module.fn

    def first(*args: Any) -> Any:
        out = call(*args)
        module.fn = call
        if (frames := precompiled.frames_compiled() - before) > 0:
            warnings.warn(f"the {module.kind} artefact compiled {frames} frame(s) at its "
                          "first call: it did not skip the compiler", AutotuneWarning,
                          stacklevel=2)  # fmt: skip
        return out

    module.fn = first
    return module
