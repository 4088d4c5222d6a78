"""The export formats: a :class:`~autotune.strategy.strategy.Strategy` in each tool's own fields,
and read back.

A strategy is autotune's own value (stage 1: its fields, validation and key); what Accelerate,
``torch.compile`` and transformers call those fields is this module's business, and nowhere
else's. Each format has its writer, its caveats (what it cannot say) and, where a file may come
back, its reader:

- ``accelerate``: ``TorchDynamoPlugin``'s fields (:func:`to_accelerate`,
  :func:`accelerate_fields`, :func:`from_accelerate`, :func:`accelerate_caveat`);
- ``accelerate-yaml``: a whole Accelerate config file, whose ``dynamo_config`` section has no
  key for Inductor options (:mod:`.accelerate_config`);
- ``torch``: exactly ``torch.compile``'s keyword arguments under ``torch_compile``, the
  granularity beside them (:func:`torch_kwargs`).
  The keyword arguments themselves are the strategy's run-time meaning, which the trial
  compiles with (``Strategy.compile_kwargs``, stage 1); the format only spells a
  ``package.module:function`` backend as its text, never importing it;
- ``transformers``: a ``generation_config`` with ``CompileConfig``'s fields
  (:func:`transformers_fields`, :func:`transformers_caveats`);
- ``continuous-batching``: ``ContinuousBatchingConfig``'s keywords (:mod:`.continuous_batching`).

:func:`render` writes one JSON format's document around autotune's block, :func:`caveats` says what
it cannot express, and :func:`strategy_of` reads a document of any JSON format back. These are
pure conversions: :mod:`.export` writes a study's choice (the store, the file),
:mod:`.exported` reads a file on the machine that uses it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from autotune.errors import NotApplicable
from autotune.strategy import Strategy, batching
from autotune.strategy.inductor import merged, spell

FORMATS = ("accelerate", "accelerate-yaml", "torch", "transformers", "continuous-batching")
# Backends that Accelerate's DynamoBackend enum can name (besides "no").
ACCELERATE_BACKENDS = ("eager", "aot_eager", "inductor", "cudagraphs", "tvm")
ACCELERATE_YAML_MODES = ("default", "reduce-overhead", "max-autotune")
PLUGIN_FIELDS = ("backend", "mode", "fullgraph", "dynamic", "options", "use_regional_compilation")
MARK_STEPS = ("it replays CUDA graphs: with a regional or nested compile, or graph breaks, call "
              "torch.compiler.cudagraph_mark_step_begin() before each step, or outputs get "
              "overwritten (autotune.apply and apply_generation do it for you)")  # fmt: skip


# accelerate: TorchDynamoPlugin's fields


def accelerate_caveat(strategy: Strategy) -> str | None:
    """Why Accelerate's ``TorchDynamoPlugin`` cannot express the strategy exactly, if so."""
    s = strategy
    if s.granularity == "nested":
        return (
            "Accelerate cannot express granularity 'nested' (nested_compile_region); "
            "use autotune.apply(model, file) to compile it as measured"
        )
    if s.granularity != "none" and s.backend not in ACCELERATE_BACKENDS:
        return (f"Accelerate's DynamoBackend has no backend {s.backend!r}; use "
                f"autotune.apply(model, file, backends=[{s.backend!r}]) to compile it as "
                "measured")  # fmt: skip
    if s.shaped:
        return (
            f"Accelerate cannot pad to buckets, mark dimensions or set a stance "
            f"({s.key}); use autotune.apply(model, file) to serve it as measured"
        )
    return None


def to_accelerate(strategy: Strategy, *, approximate: bool = False) -> dict[str, Any]:
    """``TorchDynamoPlugin``'s fields for the strategy. Raises ``NotApplicable`` where
    Accelerate cannot say it.

    With ``approximate=True`` a ``nested`` or shaped strategy becomes its nearest expressible
    form (one full compile, one shape), and a ``package.module:function`` backend stays its
    name (``load_plugin`` refuses it; ``autotune.apply`` takes the function); callers must show
    :func:`accelerate_caveat` beside it.
    """
    s = strategy
    caveat = accelerate_caveat(s)
    if caveat and not approximate:
        raise NotApplicable(caveat)
    if s.granularity == "none":
        return {
            "backend": "no",
            "mode": None,
            "fullgraph": False,
            "dynamic": None,
            "options": None,
            "use_regional_compilation": False,
        }
    options = s.inductor_options() if s.options else None  # then the mode is inside
    return {
        "backend": s.backend,
        "mode": None if options else s.mode,
        "fullgraph": s.fullgraph,
        "dynamic": s.dynamic,
        "options": options,
        "use_regional_compilation": s.granularity == "regional",
    }


def accelerate_fields(strategy: Strategy) -> dict[str, Any]:
    """Exactly the running Accelerate's ``TorchDynamoPlugin`` fields (its defaults for the ones
    autotune does not set), with nested approximated (callers say so)."""
    from accelerate.utils import TorchDynamoPlugin

    fields = to_accelerate(strategy, approximate=True)
    return {f.name: fields.get(f.name, f.default) for f in dataclasses.fields(TorchDynamoPlugin)}


def from_accelerate(fields: dict[str, Any] | Any) -> Strategy:
    """The strategy ``TorchDynamoPlugin``'s fields say (a dict, or the plugin itself)."""
    if not isinstance(fields, dict):
        fields = {name: getattr(fields, name, None) for name in PLUGIN_FIELDS}
    backend = fields.get("backend") or "no"
    backend = str(getattr(backend, "value", backend)).lower()
    if backend == "no":
        return Strategy.create("none")
    granularity = "regional" if fields.get("use_regional_compilation") else "full"
    return _read(granularity, backend, fields)


def _read(granularity: str, backend: str, fields: dict[str, Any]) -> Strategy:
    """A strategy from fields named as ``torch.compile`` names them (an options dict is spelled
    back as a mode and autotune's switches)."""
    mode, names = fields.get("mode"), ()
    if fields.get("options") and backend == "inductor":
        options = {**merged(mode or "default", ()), **fields["options"]}
        mode, names = spell(options, mode or "default")
    return Strategy.create(
        granularity, backend, mode, fields.get("dynamic"), bool(fields.get("fullgraph")), names
    )


# accelerate-yaml: the dynamo_config section of an Accelerate config file


def yaml_closest(strategy: Strategy) -> Strategy:
    """The strategy without its Inductor option switches: the closest that Accelerate's config
    file (and Transformers' Trainer) can express."""
    return dataclasses.replace(strategy, options=())


def dynamo_section(strategy: Strategy) -> dict[str, Any]:
    """The ``dynamo_config`` section of :func:`yaml_closest`'s strategy."""
    fields = to_accelerate(yaml_closest(strategy), approximate=True)
    section: dict[str, Any] = {"dynamo_backend": str(fields["backend"]).upper()}
    if fields["backend"] != "no":
        section["dynamo_mode"] = fields["mode"] or "default"
        section["dynamo_use_fullgraph"] = bool(fields["fullgraph"])
        if fields["dynamic"] is not None:
            section["dynamo_use_dynamic"] = bool(fields["dynamic"])
        section["dynamo_use_regional_compilation"] = bool(fields["use_regional_compilation"])
    return section


# torch: torch.compile's keyword arguments


def torch_kwargs(strategy: Strategy) -> dict[str, Any]:
    """Exactly ``torch.compile``'s keyword arguments (an import-path backend as its text: an
    export never imports it)."""
    return strategy.compile_kwargs(resolve=lambda name, what: name)


# transformers: generation_config with CompileConfig's fields


def cache_fields(length: int | None, edges: Sequence[int] | None = None) -> dict[str, Any]:
    """``generation_config``'s KV cache fields as measured: a static cache, of ``length`` where
    the study sized one (its longest prompt plus answer; transformers allocates one at least as
    long for a longer request, and keeps the longest for later ones); a quantiles kv_cache's
    lengths beside them (``cache_edges``, autotune's alone)."""
    return {"cache_implementation": "static", **({"max_cache_len": length} if length else {}),
            **({"cache_edges": list(edges)} if edges else {})}  # fmt: skip


def _generation(block: dict[str, Any], key: str) -> Any:
    found = block.get("generation")
    return found.get(key) if isinstance(found, dict) else None


def _whole(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def cache_edges(block: dict[str, Any]) -> tuple[int, ...] | None:
    """A quantiles kv_cache's lengths an export's autotune block carries, if any."""
    edges = _generation(block, "cache_edges")
    ok = isinstance(edges, list) and edges and all(_whole(n) for n in edges)
    return tuple(sorted(edges)) if ok else None


def cache_length(block: dict[str, Any]) -> int | None:
    """The static cache's length an export's autotune block carries, if any."""
    length = _generation(block, "max_cache_len")
    return length if _whole(length) else None


def transformers_fields(strategy: Strategy, cache_len: int | None = None) -> dict[str, Any]:
    """``generation_config`` fields: a static KV cache (of ``cache_len`` where given) and
    exactly ``CompileConfig``'s fields."""
    from transformers import CompileConfig

    s, cache = strategy, cache_fields(cache_len)
    if s.granularity == "none":
        return {**cache, "disable_compile": True}
    given = batching.compile_config(s)
    fields = {f.name: given.get(f.name, f.default) for f in dataclasses.fields(CompileConfig)}
    return {**cache, "compile_config": fields}


def transformers_caveats(strategy: Strategy) -> list[str]:
    """What ``generation_config.compile_config`` cannot say about the measured strategy."""
    s = strategy
    if s.granularity == "none":
        return []
    run = "use autotune.apply_generation(model, file) to generate as measured"
    what = (
        "transformers compiles only the decode steps (its prefill runs eager), and"
        if s.prefill == "compiled"
        else "transformers compiles the decode steps"
    )
    notes = [f"{what} only on CUDA-class devices (a CPU's generate skips compile_config); {run}"]
    if s.kv_cache != "single":
        notes.append(f"transformers sizes one static cache for every request (max_cache_len), "
                     f"not one a bucket (kv_cache {s.kv_cache!r}); {run}")  # fmt: skip
    if s.granularity != "full":
        notes.append(f"compile_config compiles the whole forward: it cannot express granularity "
                     f"{s.granularity!r}; {run}")  # fmt: skip
    if ":" in s.backend:
        notes.append(f"backend {s.backend!r} is an import path: pass the function itself")
    return notes


# every format


def caveats(strategy: Strategy, fmt: str) -> list[str]:
    """What the format cannot say about the strategy."""
    notes = [MARK_STEPS] if strategy.uses_cuda_graphs() else []
    if strategy.shaped and fmt in ("torch", "transformers"):
        notes.append(
            f"{fmt} has no setting to pad to buckets or mark dimensions "
            f"({strategy.key}); autotune.apply(model, file) serves it as measured"
        )
    if fmt == "transformers":
        return notes + transformers_caveats(strategy)
    if fmt == "continuous-batching":
        from autotune.ship import continuous_batching

        return notes + continuous_batching.caveats(strategy)
    if strategy.prefill == "eager" or strategy.kv_cache != "single":
        notes.append(f"{fmt} cannot say how generate runs ({strategy.key}): "
                     "autotune.apply_generation(model, file) generates as measured")  # fmt: skip
    if fmt != "torch" and (caveat := accelerate_caveat(strategy)):
        notes.append(caveat)
    if fmt == "accelerate-yaml" and strategy.options:
        closest = yaml_closest(strategy)
        notes.append(
            f"Accelerate's config file and environment variables have no key for Inductor "
            f"options ({', '.join(strategy.options)}), and Transformers' Trainer passes only "
            f"backend, mode and dynamic: this section is the closest expressible config, "
            f"{closest.key}; pass options= to TorchDynamoPlugin (the accelerate JSON export) to "
            "get the measured one"
        )
    if fmt == "accelerate-yaml" and strategy.mode and strategy.mode not in ACCELERATE_YAML_MODES:
        notes.append(
            f"Accelerate's config file accepts dynamo_mode {', '.join(ACCELERATE_YAML_MODES)}, "
            f"not {strategy.mode!r}: pass mode={strategy.mode!r} to TorchDynamoPlugin instead"
        )
    return notes


def render(
    strategy: Strategy, fmt: str, block: dict[str, Any], notes: list[str], study: str
) -> str:
    """One format's document (no final newline): the JSON formats carry autotune's ``block``;
    the YAML section carries ``notes`` as comments."""
    if fmt == "accelerate":
        return json.dumps({**accelerate_fields(strategy), "autotune": block}, indent=2)
    if fmt == "transformers":
        fields = transformers_fields(strategy, cache_length(block))
        body = {"generation_config": fields, "autotune": block}
        return json.dumps(body, indent=2)
    if fmt == "continuous-batching":
        from autotune.ship import continuous_batching

        return json.dumps(continuous_batching.render(strategy, block), indent=2)
    if fmt == "torch":
        body = {"torch_compile": torch_kwargs(strategy), "granularity": strategy.granularity,
                "autotune": block}  # fmt: skip
        return json.dumps(body, indent=2)
    raise ValueError(f"{fmt!r} is not a JSON format (accelerate-yaml: .accelerate_config)")


def strategy_of(data: dict[str, Any]) -> Strategy:
    """The strategy a JSON document of any format names: exact from its autotune block
    (nested included), else from torch's keyword arguments, else from Accelerate's fields."""
    block = data.get("autotune") or {}
    if "strategy" in block:
        return Strategy.from_dict(block["strategy"])
    if "granularity" in data:
        kwargs = data["torch_compile"] if isinstance(data.get("torch_compile"), dict) else data
        return _read(data["granularity"], kwargs.get("backend") or "inductor", kwargs)
    return from_accelerate(data)
