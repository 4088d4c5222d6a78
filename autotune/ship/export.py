"""Export: write the strategy that :mod:`autotune.choice.selection` chose as a config file.

The study's choice, its numbers and its caveats in one of :data:`~.formats.FORMATS` (each
format's fields are :mod:`.formats`'), beside a JSON one the artefacts of its starts; every
export is also recorded in the store. :func:`autotune.ship.exported.read` loads a JSON export
back.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from autotune import variables
from autotune.choice.selection import Point
from autotune.errors import ConfigError, StorageError, shorten
from autotune.ship import accelerate_config, formats, gate
from autotune.ship.study import StudyView
from autotune.starts import artifact
from autotune.storage import Store, mask
from autotune.strategy import Strategy, batching, kv_cache, shapes
from autotune.trial.measurement import Measurement
from autotune.workload import Workload


def document(
    store: Store, study: str, policy: str, fmt: str, max_memory_mb: float | None = None,
    merge: str | bool = True, view: StudyView | None = None,
) -> tuple[str, Point, list[str]]:  # fmt: skip
    """The export's text, the chosen point, and its caveats (``merge``: the Accelerate config
    an ``accelerate-yaml`` export is merged into, :mod:`.accelerate_config`: a file, True for
    Accelerate's default where there is one, False for none)."""
    if fmt not in formats.FORMATS:
        raise ConfigError(f"bad format {fmt!r}: use one of {', '.join(formats.FORMATS)}")
    view = view or StudyView.of(store, study)
    row, spec = view.record, view.spec
    told = view.answer(policy, max_memory_mb)
    chosen, points, front = told.chosen, told.points, told.front
    strategy = Strategy.from_dict(chosen.strategy)
    notes = formats.caveats(strategy, fmt)
    if chosen.no_graphs == "all":
        notes.append("measured without CUDA graphs: Inductor fell back from them (autotune "
                     "show says why), so it ran, and will run, as plain Inductor")  # fmt: skip
    elif chosen.no_graphs:
        notes.append(f"measured without CUDA graphs in {chosen.no_graphs}: Inductor fell back "
                     "from them there (autotune show says which and why)")  # fmt: skip
    baseline = next((p for p in points if p.key == "none"), None)
    picked, runner = _measured(store, study, chosen.key), None
    if chosen.key == "none":  # the gate measures the best compiled strategy instead
        compiled = sorted((p for p in points if p.key != "none"), key=lambda p: p.latency_ms)
        runner = _measured(store, study, compiled[0].key) if compiled else None
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
        "model": spec.model.to_dict(),
        **served_fields(strategy, spec.workload),
        "objectives": list(spec.objectives),
        "pareto_front": [dataclasses.asdict(p) for p in front],
        **told.block(),
        "caveats": notes,
    }
    if picked is not None and picked.ok:
        block["gate"] = gate.record(picked, spec.settings, runner)
    if fmt == "continuous-batching" and spec.workload.kind != "continuous":
        raise ConfigError("--format continuous-batching is for a study of --workload "
                          "continuous")  # fmt: skip
    if fmt != "continuous-batching" and spec.workload.kind == "continuous":
        notes.append("the study measured continuous batching: only --format "
                     "continuous-batching says how it was served (padding, batch "
                     "sizes)")  # fmt: skip
    if fmt == "transformers" and spec.workload.kind != "generate":
        notes.append("the study measured one forward pass, not generation (prefill and "
                     "decode): search with --workload generate")  # fmt: skip
    if fmt == "accelerate-yaml" and strategy.options:
        notes.append(f"closest expressible config: {closest_numbers(store, study, strategy)}")
    if fmt == "accelerate-yaml":
        text = accelerate_config.config_file(strategy, notes, study, spec.workload, merge)
    else:
        text = formats.render(strategy, fmt, block, notes, study)
    return text + "\n", chosen, notes


def served_fields(strategy: Strategy, workload: Workload) -> dict[str, Any]:
    """What of an export :func:`autotune.apply` serves by, beside the strategy: the study's
    workload (its traffic sets quantile buckets), the buckets' ``recompile_limit``, and for a
    generate workload the KV cache its trial sized (:func:`autotune.apply_generation` sizes
    its static caches so)."""
    w = workload
    fields = {"workload": w.to_dict(), **bucket_limit(strategy, w.traffic)}
    if w.kind == "generate":
        totals = kv_cache.footprints(strategy, w.traffic, w.answers) or [w.cache_len]
        edges = kv_cache.edges_of(strategy.kv_cache, totals)
        fields["generation"] = formats.cache_fields(max(totals), edges)
    if w.kind == "continuous":
        prompts = [seq for _, seq in w.traffic]
        fields["continuous"] = {"num_blocks": batching.blocks(prompts, list(w.answers),
                                                              strategy.batching)}  # fmt: skip
    return fields


def served_file(strategy: Strategy, workload: Workload, path: str | Path) -> Path:
    """``strategy`` exported to ``path`` as a confirmation's server loop loads it
    (:mod:`autotune.trial.server_loop`): in the ``torch`` format (which every strategy fits),
    with what :func:`autotune.apply` serves by (:func:`served_fields`), as a study's export of
    any format has it; a continuous workload's in the ``continuous-batching`` format, which
    its loop reads with :func:`autotune.continuous_batching_config`."""
    block = {"strategy": strategy.to_dict(), **served_fields(strategy, workload)}
    fmt = "continuous-batching" if workload.kind == "continuous" else "torch"
    Path(path).write_text(formats.render(strategy, fmt, block, [], "") + "\n")
    return Path(path)


def bucket_limit(strategy: Strategy, traffic: tuple[tuple[int, int], ...]) -> dict[str, int]:
    """``recompile_limit`` for a bucketed strategy: at least the buckets its traffic makes, so
    that each compiles (torch's default, 8, serves the rest eager); ``autotune.apply`` sets it
    for the model's calls. Nothing without buckets."""
    limit = shapes.recompile_limit(strategy.buckets, list(traffic), strategy.edges)
    return {} if limit is None else {"recompile_limit": limit}


def closest_numbers(store: Store, study: str, strategy: Strategy) -> str:
    """What the closest expressible config (the strategy without its options) measured."""
    closest = formats.yaml_closest(strategy)
    row = store.measurement(study, closest.key)
    if row is None:
        return f"{closest.key} was not measured in this study"
    m = Measurement.from_dict(row.payload)
    if not m.ok or m.latency is None:
        return f"{closest.key} was measured: {m.status} ({shorten(m.reason.splitlines()[0], 120)})"
    return (f"{closest.key} measured {m.compile_s:.1f} s to compile, "
            f"{m.latency.median_ms:.3g} ms per call ({m.speedup:.2f}x eager)")  # fmt: skip


def export(
    store: Store, study: str, policy: str = "knee", fmt: str = "accelerate",
    out: str | None = None, max_memory_mb: float | None = None, merge: str | bool = True,
) -> tuple[Path, Point, list[str]]:  # fmt: skip
    """Write the chosen config (default ``studies/<study>/best.json``), and beside a JSON one
    the chosen trial's compile-cache artefact (``best.cache.bin``); record the export in the
    store, or, where the store cannot be written (read-only), say so in a note. An
    ``accelerate-yaml`` export is merged into ``merge``, else Accelerate's default config."""
    text, chosen, notes = document(store, study, policy, fmt, max_memory_mb, merge)
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
    for kind, meta in m.precompiled.items():
        found, why = artifact.ship(
            meta if "error" not in meta else None, path, precompiled.SUFFIX[kind]
        )
        if found:
            shipped[kind] = found
        note = note or why
    if shipped:
        data["autotune"]["precompiled"] = shipped
    return json.dumps(data, indent=2) + "\n", note
