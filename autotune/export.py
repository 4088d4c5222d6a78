"""Export: pick one strategy from a study's measured trade-offs and write it as a config file.

Policies (eager, ``none``, is a candidate in every one, with no compile time):
- ``knee``: the Pareto point nearest the ideal point after normalising each objective (a tie
  goes to the quicker compile);
- ``fastest``: the lowest latency;
- ``quickest``: the lowest compile time among compiled strategies that are at least as fast as
  eager (a speedup >= 1 that the interleaved rounds show), else eager: a compile that buys
  nothing is never "quick";
- ``amortized:CALLS``: the lowest ``compile_s + CALLS * latency``;
- ``latency-budget:MS``: the quickest compile whose latency is within MS milliseconds.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, ConfigError
from autotune.measurement import Measurement
from autotune.store import Store, mask
from autotune.strategy import Strategy

FORMATS = ("accelerate", "accelerate-yaml", "torch", "transformers")
ACCELERATE_YAML_MODES = ("default", "reduce-overhead", "max-autotune")
_POLICIES = ("knee", "fastest", "quickest", "amortized", "latency-budget")


def latency_on_baseline(m: Measurement, baseline_ms: float | None) -> float:
    """A trial's latency on the study's common scale: the eager baseline over its gain.

    Trials run in different processes, whose speeds drift; each trial's speedup is measured
    against eager interleaved in its own process. Scaling one baseline by that speedup keeps
    cross-process noise out of the ranking, and a speedup the rounds do not show counts as none.
    """
    assert m.latency is not None
    if baseline_ms is None:
        return m.latency.median_ms
    if Strategy.from_dict(m.strategy).granularity == "none":
        return baseline_ms
    return baseline_ms / m.gain()


@dataclass(frozen=True)
class Point:
    """A feasible measured strategy, as the policies see it."""

    key: str
    strategy: dict[str, Any]
    compile_s: float
    latency_ms: float  # on the study's common scale, see latency_on_baseline
    memory_mb: float | None
    speedup: float  # as measured, interleaved with eager in the trial's own process
    trial_number: int | None
    raw_latency_ms: float = 0.0
    significant: bool = False

    @classmethod
    def of(cls, m: Measurement, trial_number: int | None, baseline_ms: float | None) -> Point:
        assert m.latency is not None and m.compile_s is not None and m.speedup is not None
        memory = m.memory.compiled_peak_mb if m.memory else None
        key = Strategy.from_dict(m.strategy).key
        speedup = 1.0 if key == "none" else m.speedup
        return cls(
            key, m.strategy, m.compile_s, latency_on_baseline(m, baseline_ms), memory, speedup,
            trial_number, m.latency.median_ms, key != "none" and m.gain() != 1.0,
        )  # fmt: skip

    def total_s(self, calls: float) -> float:
        """Compile once, then ``calls`` calls: the time a job of that length spends."""
        return self.compile_s + calls * self.latency_ms / 1e3


def parse_policy(policy: str) -> tuple[str, float | None]:
    """``knee`` -> ("knee", None); ``amortized:1000`` -> ("amortized", 1000.0)."""
    name, _, arg = policy.partition(":")
    if name not in _POLICIES:
        raise ConfigError(f"bad policy {policy!r}: use {', '.join(_POLICIES[:3])}, "
                          "amortized:CALLS or latency-budget:MS")  # fmt: skip
    needs_arg = name in ("amortized", "latency-budget")
    if needs_arg != bool(arg):
        raise ConfigError(f"bad policy {policy!r}: amortized:CALLS and latency-budget:MS take "
                          "a number, the others none")  # fmt: skip
    try:
        value = float(arg) if arg else None
    except ValueError:
        raise ConfigError(f"bad policy {policy!r}: {arg!r} is not a number") from None
    if value is not None and value <= 0:
        raise ConfigError(f"bad policy {policy!r}: the number must be positive")
    return name, value


def candidates(store: Store, study: str, max_memory_mb: float | None = None) -> list[Point]:
    """Every feasible measured strategy of the study, eager included."""
    points = []
    rows = store.measurements(study)
    base = next((Measurement.from_dict(r.payload) for r in rows if r.key == "none"), None)
    baseline_ms = base.latency.median_ms if base and base.ok and base.latency else None
    for row in rows:
        m = Measurement.from_dict(row.payload)
        if not m.feasible and not (row.key == "none" and m.ok):
            continue
        point = Point.of(m, row.trial_number, baseline_ms)
        if max_memory_mb is not None and (point.memory_mb or 0) > max_memory_mb:
            continue
        points.append(point)
    return points


def _objectives(p: Point, objectives: tuple[str, ...]) -> tuple[float, ...]:
    values = {"compile": p.compile_s, "latency": p.latency_ms, "memory": p.memory_mb or 0.0}
    return tuple(values[o] for o in objectives)


def pareto(
    points: list[Point], objectives: tuple[str, ...] = ("compile", "latency")
) -> list[Point]:
    """The non-dominated points, sorted by compile time."""
    vals = [_objectives(p, objectives) for p in points]
    front = [
        p
        for p, v in zip(points, vals, strict=True)
        if not any(all(a <= b for a, b in zip(w, v, strict=True)) and w != v for w in vals)
    ]
    return sorted(front, key=lambda p: (p.compile_s, p.latency_ms))


def pick(
    points: list[Point], policy: str, objectives: tuple[str, ...] = ("compile", "latency")
) -> Point:
    """The point a policy chooses; ``AutotuneError`` if none qualifies."""
    name, arg = parse_policy(policy)
    if not points:
        raise AutotuneError("the study has no feasible trial to export")
    if name == "fastest":
        return min(points, key=lambda p: (p.latency_ms, p.compile_s))
    if name == "quickest":
        fast = [p for p in points if p.key != "none" and p.significant and p.speedup >= 1.0]
        eager = [p for p in points if p.key == "none"]
        return min(fast or eager or points, key=lambda p: (p.compile_s, p.latency_ms))
    if name == "amortized":
        assert arg is not None
        return min(points, key=lambda p: (p.total_s(arg), p.latency_ms))
    if name == "latency-budget":
        within = [p for p in points if p.latency_ms <= (arg or 0)]
        if not within:
            best = min(p.latency_ms for p in points)
            raise AutotuneError(
                f"no strategy meets the latency budget of {arg:g} ms; the fastest takes "
                f"{best:.3g} ms"
            )
        return min(within, key=lambda p: (p.compile_s, p.latency_ms))
    front = pareto(points, objectives)
    values = {id(p): _objectives(p, objectives) for p in front}
    lo = [min(v[i] for v in values.values()) for i in range(len(objectives))]
    hi = [max(v[i] for v in values.values()) for i in range(len(objectives))]

    def distance(p: Point) -> float:
        norm = [
            (v - lo[i]) / (hi[i] - lo[i]) if hi[i] > lo[i] else 0.0
            for i, v in enumerate(values[id(p)])
        ]
        return math.hypot(*norm)

    # a tie (a front of two points always ties) goes to the quicker compile: the same distance
    # from the ideal buys nothing for the extra compile time
    return min(front, key=lambda p: (round(distance(p), 9), p.compile_s, p.latency_ms))


def accelerate_fields(strategy: Strategy) -> dict[str, Any]:
    """Exactly ``TorchDynamoPlugin``'s fields, with nested approximated (callers say so)."""
    from accelerate.utils import TorchDynamoPlugin

    fields = strategy.to_accelerate(approximate=True)
    return {f.name: fields.get(f.name, f.default) for f in dataclasses.fields(TorchDynamoPlugin)}


def caveats(strategy: Strategy, fmt: str) -> list[str]:
    """What the chosen format cannot say about the strategy."""
    notes = []
    if fmt == "transformers":
        return transformers_caveats(strategy)
    if fmt != "torch" and (caveat := strategy.accelerate_caveat()):
        notes.append(caveat)
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
    points = candidates(store, study, max_memory_mb)
    objectives = tuple(row.spec.get("objectives") or ("compile", "latency"))
    chosen = pick(points, policy, objectives)
    strategy = Strategy.from_dict(chosen.strategy)
    notes = caveats(strategy, fmt)
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
        "objectives": list(objectives),
        "pareto_front": [dataclasses.asdict(p) for p in pareto(points, objectives)],
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
        body = {**strategy.to_dict(), "autotune": block}  # torch.compile kwargs + granularity
        text = json.dumps(body, indent=2)
    else:
        text = yaml_section(strategy, notes, study)
    return text + "\n", chosen, notes


def transformers_fields(strategy: Strategy) -> dict[str, Any]:
    """``generation_config`` fields: a static KV cache and exactly ``CompileConfig``'s fields."""
    from transformers import CompileConfig

    s = strategy.canonical()
    if s.granularity == "none":
        return {"cache_implementation": "static", "disable_compile": True}
    given = {"fullgraph": s.fullgraph, "dynamic": s.dynamic, "backend": s.backend,
             "mode": s.mode, "options": None}  # fmt: skip
    fields = {f.name: given.get(f.name, f.default) for f in dataclasses.fields(CompileConfig)}
    return {"cache_implementation": "static", "compile_config": fields}


def transformers_caveats(strategy: Strategy) -> list[str]:
    """What ``generation_config.compile_config`` cannot say about the measured strategy."""
    s = strategy.canonical()
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
    """The ``dynamo_config`` section of an Accelerate config file."""
    fields = strategy.to_accelerate(approximate=True)
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
    """Write the chosen config (default ``studies/<study>/best.json``) and record the export."""
    text, chosen, notes = document(store, study, policy, fmt, max_memory_mb)
    suffix = ".yaml" if fmt == "accelerate-yaml" else ".json"
    path = Path(out) if out else Path("studies") / study / f"best{suffix}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
    store.add_export(study, policy, fmt, chosen.key, text)
    return path, chosen, notes


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
