"""Export: write the strategy that :mod:`autotune.choice.selection` chose as a config file.

Formats: ``accelerate`` (JSON: ``TorchDynamoPlugin``'s fields plus an ``autotune`` block),
``accelerate-yaml`` (the ``dynamo_config`` section of an Accelerate config file), ``torch``
(``torch.compile`` keyword arguments plus the granularity) and ``transformers`` (a
``generation_config`` with ``CompileConfig``'s fields). Every export is also recorded in the
store. ``read`` loads an exported JSON file back.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from autotune import variables
from autotune.choice.objectives import default
from autotune.choice.selection import Point
from autotune.choice.verdict import answer
from autotune.errors import ConfigError, StorageError, shorten
from autotune.starts import artifact
from autotune.storage import Store, mask
from autotune.strategy import shapes
from autotune.strategy.strategy import Strategy
from autotune.trial.measurement import Measurement

FORMATS = ("accelerate", "accelerate-yaml", "torch", "transformers")
ACCELERATE_YAML_MODES = ("default", "reduce-overhead", "max-autotune")


def accelerate_fields(strategy: Strategy) -> dict[str, Any]:
    """Exactly ``TorchDynamoPlugin``'s fields, with nested approximated (callers say so)."""
    from accelerate.utils import TorchDynamoPlugin

    fields = strategy.to_accelerate(approximate=True)
    return {f.name: fields.get(f.name, f.default) for f in dataclasses.fields(TorchDynamoPlugin)}


MARK_STEPS = ("it replays CUDA graphs: with a regional or nested compile, or graph breaks, call "
              "torch.compiler.cudagraph_mark_step_begin() before each step, or outputs get "
              "overwritten (autotune.apply and apply_generation do it for you)")  # fmt: skip


def caveats(strategy: Strategy, fmt: str) -> list[str]:
    """What the chosen format cannot say about the strategy."""
    notes = [MARK_STEPS] if strategy.uses_cuda_graphs() else []
    if strategy.shaped and fmt in ("torch", "transformers"):
        notes.append(
            f"{fmt} has no setting to pad to buckets or mark dimensions "
            f"({strategy.key}); autotune.apply(model, file) serves it as measured"
        )
    if fmt == "transformers":
        return notes + transformers_caveats(strategy)
    if fmt != "torch" and (caveat := strategy.accelerate_caveat()):
        notes.append(caveat)
    if fmt == "accelerate-yaml" and strategy.options:
        closest = strategy.without_options()
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


def document(
    store: Store, study: str, policy: str, fmt: str, max_memory_mb: float | None = None
) -> tuple[str, Point, list[str]]:
    """The export's text, the chosen point, and its caveats."""
    if fmt not in FORMATS:
        raise ConfigError(f"bad format {fmt!r}: use one of {', '.join(FORMATS)}")
    row = store.study(study)
    if row is None:
        raise ConfigError(f"no study named {study!r} in {mask(store.url)}")
    kind = (row.spec.get("workload") or {}).get("kind", "inference")
    objectives = tuple(row.spec.get("objectives") or default(kind))
    told = answer(store.measurements(study), study, row.spec, policy, max_memory_mb,
                  store.confirmation(study, policy))  # fmt: skip
    chosen, points, front = told.chosen, told.points, told.front
    strategy = Strategy.from_dict(chosen.strategy)
    notes = caveats(strategy, fmt)
    if chosen.no_graphs == "all":
        notes.append("measured without CUDA graphs: Inductor fell back from them (autotune "
                     "show says why), so it ran, and will run, as plain Inductor")  # fmt: skip
    elif chosen.no_graphs:
        notes.append(f"measured without CUDA graphs in {chosen.no_graphs}: Inductor fell back "
                     "from them there (autotune show says which and why)")  # fmt: skip
    baseline = next((p for p in points if p.key == "none"), None)
    block = {
        "strategy": strategy.to_dict(),
        "key": chosen.key,
        "granularity": strategy.granularity,
        "measured": dataclasses.asdict(chosen),
        "eager_baseline": dataclasses.asdict(baseline) if baseline else None,
        "policy": policy,
        "study": study,
        "storage": mask(store.url),
        "environment": row.environment,
        "model": row.spec.get("model"),
        "workload": row.spec.get("workload"),
        **bucket_limit(strategy, row.spec.get("workload") or {}),
        "objectives": list(objectives),
        "pareto_front": [dataclasses.asdict(p) for p in front],
        **told.block(),
        "caveats": notes,
    }
    if fmt == "accelerate":
        text = json.dumps({**accelerate_fields(strategy), "autotune": block}, indent=2)
    elif fmt == "transformers":
        if (row.spec.get("workload") or {}).get("kind") != "generate":
            notes.append("the study measured one forward pass, not generation (prefill and "
                         "decode): search with --workload generate")  # fmt: skip
        body = {"generation_config": transformers_fields(strategy), "autotune": block}
        text = json.dumps(body, indent=2)
    elif fmt == "torch":
        body = {"granularity": strategy.granularity, **torch_kwargs(strategy), "autotune": block}
        text = json.dumps(body, indent=2)
    else:
        if strategy.options:
            notes.append(f"closest expressible config: {closest_numbers(store, study, strategy)}")
        text = yaml_section(strategy, notes, study)
    return text + "\n", chosen, notes


def bucket_limit(strategy: Strategy, workload: dict[str, Any]) -> dict[str, int]:
    """``recompile_limit`` for a bucketed strategy: at least the buckets its traffic makes, so
    that each compiles (torch's default, 8, serves the rest eager); ``autotune.apply`` sets it
    for the model's calls. Nothing without buckets."""
    traffic = [tuple(r) for r in workload.get("traffic") or ()]
    limit = shapes.recompile_limit(strategy.buckets, traffic)
    return {} if limit is None else {"recompile_limit": limit}


def torch_kwargs(strategy: Strategy) -> dict[str, Any]:
    """Exactly ``torch.compile``'s keyword arguments (an import-path backend as its text: an
    export never imports it)."""
    return strategy.compile_kwargs(resolve=lambda name, what: name)


def closest_numbers(store: Store, study: str, strategy: Strategy) -> str:
    """What the closest expressible config (the strategy without its options) measured."""
    closest = strategy.without_options()
    row = store.measurement(study, closest.key)
    if row is None:
        return f"{closest.key} was not measured in this study"
    m = Measurement.from_dict(row.payload)
    if not m.ok or m.latency is None:
        return f"{closest.key} was measured: {m.status} ({shorten(m.reason.splitlines()[0], 120)})"
    return (f"{closest.key} measured {m.compile_s:.1f} s to compile, "
            f"{m.latency.median_ms:.3g} ms per call ({m.speedup:.2f}x eager)")  # fmt: skip


def transformers_fields(strategy: Strategy) -> dict[str, Any]:
    """``generation_config`` fields: a static KV cache and exactly ``CompileConfig``'s fields."""
    from transformers import CompileConfig

    s = strategy
    if s.granularity == "none":
        return {"cache_implementation": "static", "disable_compile": True}
    options = s.inductor_options() if s.options else None  # then its mode is inside
    given = {"fullgraph": s.fullgraph, "dynamic": s.dynamic, "backend": s.backend,
             "mode": None if options else s.mode, "options": options}  # fmt: skip
    fields = {f.name: given.get(f.name, f.default) for f in dataclasses.fields(CompileConfig)}
    return {"cache_implementation": "static", "compile_config": fields}


def transformers_caveats(strategy: Strategy) -> list[str]:
    """What ``generation_config.compile_config`` cannot say about the measured strategy."""
    s = strategy
    if s.granularity == "none":
        return []
    run = "use autotune.apply_generation(model, file) to generate as measured"
    notes = [
        "transformers compiles only the decode steps (its prefill runs eager), and only on "
        f"CUDA-class devices (a CPU's generate skips compile_config); {run}"
    ]
    if s.granularity != "full":
        notes.append(f"compile_config compiles the whole forward: it cannot express granularity "
                     f"{s.granularity!r}; {run}")  # fmt: skip
    if ":" in s.backend:
        notes.append(f"backend {s.backend!r} is an import path: pass the function itself")
    return notes


def yaml_section(strategy: Strategy, notes: list[str], study: str) -> str:
    """The ``dynamo_config`` section of an Accelerate config file (for a strategy with Inductor
    options, of the closest expressible one, with what that one measured)."""
    fields = strategy.without_options().to_accelerate(approximate=True)
    lines = [f"# autotune: study {study}, strategy {strategy.key}"]
    lines += [f"# NOTE: {n}" for n in notes]
    lines.append("dynamo_config:")
    lines.append(f"  dynamo_backend: {str(fields['backend']).upper()}")
    if fields["backend"] != "no":
        lines.append(f"  dynamo_mode: {fields['mode'] or 'default'}")
        lines.append(f"  dynamo_use_fullgraph: {str(bool(fields['fullgraph'])).lower()}")
        dynamic = fields["dynamic"]
        if dynamic is not None:
            lines.append(f"  dynamo_use_dynamic: {str(dynamic).lower()}")
        regional = str(bool(fields["use_regional_compilation"])).lower()
        lines.append(f"  dynamo_use_regional_compilation: {regional}")
    return "\n".join(lines)


def export(
    store: Store, study: str, policy: str = "knee", fmt: str = "accelerate",
    out: str | None = None, max_memory_mb: float | None = None,
) -> tuple[Path, Point, list[str]]:  # fmt: skip
    """Write the chosen config (default ``studies/<study>/best.json``), and beside a JSON one
    the chosen trial's compile-cache artefact (``best.cache.bin``); record the export in the
    store, or, where the store cannot be written (read-only), say so in a note."""
    text, chosen, notes = document(store, study, policy, fmt, max_memory_mb)
    suffix = ".yaml" if fmt == "accelerate-yaml" else ".json"
    path = Path(out) if out else variables.studies() / study / f"best{suffix}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if fmt != "accelerate-yaml":
            text, note = with_starts(store, study, chosen.key, text, path)
            notes = [*notes, note] if note else notes
        path.write_text(text)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
    try:
        store.add_export(study, policy, fmt, chosen.key, text)
    except StorageError as exc:  # the file stands; the record is what could not be written
        notes = [*notes, f"wrote {path}, but did not record the export in the storage ({exc})"]
    return path, chosen, notes


def starts(store: Store, study: str, key: str) -> tuple[dict[str, float | None], Any]:
    """What one start of a stored strategy cost (cold and every later start measured), and
    its cache artefact's record (None when it has none)."""
    m = _measured(store, study, key)
    if m is None:
        return {}, None
    return {k: m.start_s(k) for k in m.starts}, m.artifact


def _measured(store: Store, study: str, key: str) -> Measurement | None:
    row = store.measurement(study, key)
    return None if row is None else Measurement.from_dict(row.payload)


def with_starts(store: Store, study: str, key: str, text: str, path: Path) -> tuple[str, str]:
    """The JSON export with what one start of the chosen strategy costs (cold and every later
    start measured), and its artefacts written beside ``path`` (the compile cache; a
    precompiled function and an AOTInductor package where they were built); a note where
    one of them cannot be shipped."""
    from autotune.starts import precompiled

    m = _measured(store, study, key)
    if m is None:
        return text, ""
    data = json.loads(text)
    if m.starts:
        data["autotune"]["start_s"] = {k: m.start_s(k) for k in m.starts}
    block, note = artifact.ship(m.artifact, path)
    if block:
        data["autotune"]["cache_artifact"] = block
    shipped = {}
    for kind, meta in m.ahead.items():
        found, why = artifact.ship(
            meta if "error" not in meta else None, path, precompiled.SUFFIX[kind]
        )
        if found:
            shipped[kind] = found
        note = note or why
    if shipped:
        data["autotune"]["ahead"] = shipped
    return json.dumps(data, indent=2) + "\n", note


def read(path: str | Path) -> tuple[Strategy, dict[str, Any]]:
    """The strategy an exported JSON file names (exact, nested included), and its fields."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"no such file: {path}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not an autotune JSON export: {exc}") from None
    block = data.get("autotune") or {}
    if "strategy" in block:
        return Strategy.from_dict(block["strategy"]), data
    if "granularity" in data:
        fields = {k: data.get(k) for k in ("backend", "mode", "dynamic", "fullgraph")}
        return Strategy.create(data["granularity"], **fields), data
    return Strategy.from_accelerate(data), data
