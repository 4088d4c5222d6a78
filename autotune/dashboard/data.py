"""The dashboard's data: a study read once from the store, then one pure function per plot.

Each ``*_info`` function is testable on its own; :mod:`.figures` only draws what they return.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import ConfigError
from autotune.measurement import Measurement
from autotune.selection import SPEEDS, Point, candidates, gain, pareto, pick
from autotune.store import Store, mask
from autotune.strategy import Strategy

CALLS = [10**e for e in range(0, 9)]  # the break-even plot's x axis, calls made after compiling
MIN_TRIALS_FOR_IMPORTANCE = 6


@dataclass
class Trial:
    """One measured strategy of the study, as the dashboard shows it."""

    key: str
    strategy: Strategy
    measurement: Measurement
    trial_number: int | None

    @property
    def feasible(self) -> bool:
        m = self.measurement
        return m.feasible or (self.key == "none" and m.ok)


@dataclass
class StudyData:
    """Everything the page shows, read once from the store."""

    name: str
    storage: str
    spec: dict[str, Any]
    environment: dict[str, Any]
    trials: list[Trial]
    points: list[Point]
    chosen: Point | None
    policy: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def objectives(self) -> tuple[str, ...]:
        return tuple(self.spec.get("objectives") or ("compile", "latency"))


def load(store: Store, study: str, policy: str | None = None) -> StudyData:
    """Read a study: its spec, every measurement, the candidates and the chosen point."""
    row = store.study(study)
    if row is None:
        raise ConfigError(f"no study named {study!r} in {mask(store.url)}")
    trials = [
        Trial(
            r.key,
            Strategy.from_dict(r.payload["strategy"]),
            Measurement.from_dict(r.payload),
            r.trial_number,
        )
        for r in store.measurements(study)
    ]
    exports = store.exports(study)
    policy = policy or (exports[-1].policy if exports else row.spec.get("policy", "knee"))
    points = candidates(store, study, row.spec.get("max_memory_mb"))
    try:
        objectives = tuple(row.spec.get("objectives") or ("compile", "latency"))
        chosen = pick(points, policy, objectives) if points else None
    except Exception:  # a policy no point meets (an impossible latency budget): show none
        chosen = None
    counts: dict[str, int] = {}
    for t in trials:
        status = t.measurement.status
        if status == "ok" and not t.feasible:
            status = "wrong answers"
        if t.measurement.deduced:  # settled without measuring (autotune.deduction)
            status = "implied failures" if status != "ok" else "told as repeats"
        counts[status] = counts.get(status, 0) + 1
    return StudyData(
        study, mask(store.url), row.spec, row.environment, trials, points, chosen, policy, counts
    )


def header_info(d: StudyData) -> dict[str, Any]:
    """The header: what was studied where, trial counts, the baseline and the choice."""
    w = d.spec.get("workload", {})
    baseline = next((t for t in d.trials if t.key == "none"), None)
    eager_ms = (
        baseline.measurement.latency.median_ms
        if baseline and baseline.measurement.latency
        else None
    )
    return {
        "study": d.name,
        "storage": d.storage,
        "model": (d.spec.get("model") or {}).get("name"),
        "workload": f"{w.get('kind')} · batch {w.get('batch_size')} · seq {w.get('seq_len')} · "
        f"{w.get('dtype')}",
        "device": f"{w.get('device')} · {d.environment.get('device_name')}",
        "torch": d.environment.get("torch"),
        "counts": dict(sorted(d.counts.items())),
        "eager_ms": eager_ms,
        "chosen": d.chosen.key if d.chosen else None,
        "policy": d.policy,
    }


def pareto_info(d: StudyData) -> dict[str, Any]:
    """Every feasible point, the front (joined in order), eager, and the chosen point."""
    front = pareto(d.points)
    by_key = {t.key: t for t in d.trials}
    rows = []
    for p in d.points:
        s = by_key[p.key].strategy if p.key in by_key else Strategy.from_dict(p.strategy)
        rows.append(
            {
                "key": p.key,
                "compile_s": p.compile_s,
                "latency_ms": p.latency_ms,
                "granularity": s.granularity,
                "backend": s.backend,
                "speedup": p.speedup,
                "on_front": p in front,
                "hover": hover(by_key.get(p.key)),
            }
        )
    eager = next((p for p in d.points if p.key == "none"), None)
    return {
        "points": rows,
        "front": [(p.compile_s, p.latency_ms, p.key) for p in front],
        "eager": (eager.compile_s, eager.latency_ms) if eager else None,
        "chosen": (d.chosen.compile_s, d.chosen.latency_ms, d.chosen.key) if d.chosen else None,
    }


def breakeven_info(d: StudyData) -> dict[str, Any]:
    """Time of one start and its calls, against calls, for the front and eager: after a cold
    start and after a warm one (a restart with the caches in place), and where each beats
    eager."""
    front = pareto(d.points)
    eager = next((p for p in d.points if p.key == "none"), None)
    lines = {p.key: [p.total_s(n) for n in CALLS] for p in front}
    warm = {p.key: [p.warm_s + n * p.latency_ms / 1e3 for n in CALLS]
            for p in front if p.key != "none" and p.warm_s < p.compile_s}  # fmt: skip
    if eager is not None:
        lines.setdefault("none", [eager.total_s(n) for n in CALLS])
    crossings, warm_crossings = {}, {}
    for p in front:
        if eager is None or p.key == "none":
            continue
        gain_s = (eager.latency_ms - p.latency_ms) / 1e3
        crossings[p.key] = p.compile_s / gain_s if gain_s > 0 else math.inf
        if p.key in warm:
            warm_crossings[p.key] = p.warm_s / gain_s if gain_s > 0 else math.inf
    return {"calls": CALLS, "lines": lines, "crossings": crossings, "warm": warm,
            "warm_crossings": warm_crossings}  # fmt: skip


def speedup_info(d: StudyData) -> list[tuple[str, float, bool]]:
    """Speedup over eager of each feasible compiled trial, best first, and whether the
    interleaved rounds show it (sign test)."""
    rows = [
        (t.key, t.measurement.speedup or 0.0, gain(t.measurement) != 1.0)
        for t in d.trials
        if t.feasible and t.key != "none"
    ]
    return sorted(rows, key=lambda r: -r[1])


def latency_info(d: StudyData) -> list[tuple[str, list[float]]]:
    """The raw latency samples of each trial that ran (eager first), for box plots."""
    rows = [(t.key, t.measurement.latency.samples_ms) for t in d.trials if t.measurement.latency]
    return sorted(rows, key=lambda r: (r[0] != "none", sorted(r[1])[len(r[1]) // 2]))


def parallel_info(d: StudyData) -> dict[str, list[Any]]:
    """Strategy fields and both objectives, one column per axis, for the trials that ran."""
    ms = [(t, t.measurement) for t in d.trials]
    ran = [t for t, m in ms if m.ok and m.latency and not m.deduced]
    return {
        "granularity": [t.strategy.granularity for t in ran],
        "backend": [t.strategy.backend for t in ran],
        "mode": [t.strategy.mode or "-" for t in ran],
        "options": ["+".join(t.strategy.options) or "none" for t in ran],
        "dynamic": [str(t.strategy.dynamic) for t in ran],
        "fullgraph": [str(t.strategy.fullgraph) for t in ran],
        "compile_s": [t.measurement.compile_s for t in ran],
        "latency_ms": [t.measurement.latency.median_ms for t in ran],  # type: ignore[union-attr]
    }


def phases_info(d: StudyData) -> list[dict[str, float | str]]:
    """Compile time split into dynamo and the backend (inductor's codegen within it)."""
    rows = []
    for t in d.trials:
        ph = t.measurement.phases
        if t.key == "none" or not ph:
            continue
        backend = ph.get("backend_s", 0.0)
        codegen = min(ph.get("codegen_s", 0.0), backend)
        rows.append(
            {
                "key": t.key,
                "dynamo_s": ph.get("dynamo_s", 0.0),
                "backend_s": backend - codegen,
                "codegen_s": codegen,
            }
        )
    return rows


def issues_info(d: StudyData) -> list[dict[str, Any]]:
    """Graph breaks, recompiles and failures, with their reasons, worst first."""
    rows = []
    for t in d.trials:
        m = t.measurement
        g = m.graphs
        if (m.ok and m.feasible and not (g and (g.breaks or g.recompiles))) or t.key == "none":
            continue
        reasons = ([m.reason] if m.reason else []) + (
            g.break_reasons + g.recompile_reasons if g else []
        )
        if m.ok and m.accuracy and not m.accuracy.passed:
            reasons.insert(0, f"wrong answers: {m.accuracy.detail}")
        if g and g.limit_hit:  # its latency is not the compiled latency: say so first
            reasons.insert(0, g.limit_hit + (f"; fix: {g.limit_hint}" if g.limit_hint else ""))
        status = "wrong answers" if m.ok and not t.feasible else m.status
        if m.deduced:  # not measured: say how it follows, before its source's reasons
            if m.ok:
                continue  # a repeat of a measured trial, whose row is there already
            status = f"{status} (implied)"
        rows.append(
            {
                "key": t.key,
                "status": "recompile limit hit" if status == "ok" and m.limit_hit else status,
                "breaks": g.breaks if g else 0,
                "recompiles": g.recompiles if g else 0,
                "reasons": reasons,
            }
        )
    return sorted(rows, key=lambda r: (r["status"] == "ok", -r["breaks"] - r["recompiles"]))


def importance_info(store: Store, study: str, objectives: tuple[str, ...]) -> dict[str, float]:
    """Optuna's parameter importances for latency, once there are enough completed trials."""
    import optuna

    from autotune.trials import quiet_optuna

    latency = next(i for i, o in enumerate(objectives) if o in SPEEDS)

    quiet_optuna()
    try:
        s = optuna.load_study(study_name=study, storage=store.url)
    except KeyError:  # autotune's tables without Optuna's study (written by hand or a tool)
        return {}
    done = [t for t in s.trials if t.state.name == "COMPLETE" and "repeat_of" not in t.user_attrs]
    # Optuna's importances cover every parameter: the fields and each Inductor option switch
    if len(done) < MIN_TRIALS_FOR_IMPORTANCE:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PED-ANOVA's reminder that lower is better: it is
            return optuna.importance.get_param_importances(s, target=lambda t: t.values[latency])
    except (ValueError, RuntimeError):  # a parameter that never varied, too few trials, ...
        return {}


def hover(t: Trial | None) -> str:
    """The full strategy and its measurements, for a point's hover box."""
    if t is None:
        return ""
    m, s = t.measurement, t.strategy
    lines = [
        f"<b>{s.key}</b>",
        f"mode {s.mode or '-'} · options {'+'.join(s.options) or 'none'} · "
        f"dynamic {s.dynamic} · fullgraph {s.fullgraph}",
    ]
    if m.deduced:
        lines.append(f"not measured: {m.deduced}")
    if m.latency and m.compile_s is not None:
        lines.append(
            f"compile {m.compile_s:.2f} s · latency {m.latency.median_ms:.3f} ms "
            f"(p10 {m.latency.p10_ms:.3f}, p90 {m.latency.p90_ms:.3f})"
        )
    if m.starts.get("warm") or m.starts.get("portable"):
        costs = " · ".join(f"{k} {m.start_s(k):.2f} s" for k in ("warm", "portable")
                           if m.start_s(k) is not None)  # fmt: skip
        lines.append(f"later starts: {costs or 'not measured'}")
    if m.ttft and m.tokens_per_s:
        lines.append(f"TTFT {m.ttft.median_ms:.1f} ms · {m.tokens_per_s:.1f} tokens/s "
                     "(latency: per decoded token)")  # fmt: skip
    if m.speedup:
        lines.append(f"speedup {m.speedup:.2f}x vs eager in the same process")
    if m.graphs and m.graphs.limit_hit:
        lines.append(f"<b>{m.graphs.limit_hit[:160]}</b>: not the compiled latency")
    if m.memory:
        lines.append(f"peak memory {m.memory.compiled_peak_mb:.0f} MiB ({m.memory.kind})")
    if m.graphs:
        lines.append(
            f"{m.graphs.count} graphs · {m.graphs.breaks} breaks · "
            f"{m.graphs.recompiles} recompiles"
        )
    if t.trial_number is not None:
        lines.append(f"trial {t.trial_number}")
    return "<br>".join(lines)
