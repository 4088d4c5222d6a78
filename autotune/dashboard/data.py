"""The dashboard's data: a study read once from the store, then one pure function per figure,
each returning a NamedTuple (or a list of them) that :mod:`.figures` only draws.
"""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from autotune.choice.objectives import SPEEDS
from autotune.choice.selection import Point, candidates, gain, pareto
from autotune.choice.verdict import Answer
from autotune.search.spec import StudySpec
from autotune.ship.study import StudyView
from autotune.storage import Store, mask
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.workload import describe

CALLS = [10**e for e in range(0, 9)]  # the break-even plot's x axis, calls made after compiling
MIN_TRIALS_FOR_IMPORTANCE = 6


@dataclass
class Trial:
    """One stored strategy of the study, as the dashboard shows it."""

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
    spec: StudySpec
    environment: dict[str, Any]
    trials: list[Trial]
    points: list[Point]
    chosen: Point | None
    policy: str
    counts: dict[str, int] = field(default_factory=dict)
    answer: Answer | None = None  # the verdict, what was left out, the confirmation

    @property
    def objectives(self) -> tuple[str, ...]:
        return self.spec.objectives

    def trial(self, key: str) -> Trial | None:
        return next((t for t in self.trials if t.key == key), None)


def load(store: Store, study: str, policy: str | None = None) -> StudyData:
    """Read a study once: its spec, every stored measurement and export; then the candidates
    and the chosen point, from what was read."""
    view = StudyView.of(store, study)
    row, stored = view.record, view.rows
    trials = [Trial(r.key, Strategy.from_dict(r.payload["strategy"]),
                    Measurement.from_dict(r.payload), r.trial_number) for r in stored]  # fmt: skip
    exports = store.exports(study)
    spec = row.spec
    policy = policy or (exports[-1].policy if exports else spec.policy)
    points = candidates(stored, spec.max_memory_mb)
    d = StudyData(study, mask(store.url), spec, row.environment, trials, points, None, policy)
    try:
        d.answer = view.answer(policy)
        d.chosen, d.points = d.answer.chosen, d.answer.points
    except Exception:  # nothing feasible yet, or a policy no point meets: show none
        d.chosen = None
    for t in trials:
        status = t.measurement.status
        if status == "ok" and not t.feasible:
            status = "wrong answers"
        if t.measurement.deduced:  # settled without measuring (autotune.search.deduction)
            status = "implied failures" if status != "ok" else "told as repeats"
        d.counts[status] = d.counts.get(status, 0) + 1
    return d


class Header(NamedTuple):
    """The page's header; ``lines`` the study's answer as the search's summary gives it."""

    study: str
    storage: str
    model: str | None
    workload: str
    device: str
    torch: str | None
    counts: dict[str, int]
    eager_ms: float | None
    chosen: str | None
    policy: str
    lines: list[str]


def header_info(d: StudyData) -> Header:
    """The header: what was studied where, trial counts, the baseline and the choice."""
    w = d.spec.workload
    baseline = d.trial("none")
    latency = baseline.measurement.latency if baseline else None
    return Header(
        d.name, d.storage, d.spec.model.name, describe(w),
        f"{w.device} · {d.environment.get('device_name')}", d.environment.get("torch"),
        dict(sorted(d.counts.items())), latency.median_ms if latency else None,
        d.chosen.key if d.chosen else None, d.policy, d.answer.lines() if d.answer else [],
    )  # fmt: skip


class ParetoPoint(NamedTuple):
    key: str
    compile_s: float
    latency_ms: float
    granularity: str
    backend: str
    speedup: float
    on_front: bool
    trial: Trial | None  # for the hover box


class ParetoInfo(NamedTuple):
    points: list[ParetoPoint]
    front: list[tuple[float, float, str]]  # compile, latency, key: in compile order
    eager: tuple[float, float] | None
    chosen: tuple[float, float, str] | None


def pareto_info(d: StudyData) -> ParetoInfo:
    """Every feasible point, the front (joined in order), eager, and the chosen point."""
    front = pareto(d.points)  # the figure's two axes: cold compile and latency
    rows = []
    for p in d.points:
        t = d.trial(p.key)
        s = t.strategy if t else Strategy.from_dict(p.strategy)
        rows.append(ParetoPoint(p.key, p.compile_s, p.latency_ms, s.granularity, s.backend,
                                p.speedup, p in front, t))  # fmt: skip
    eager = next((p for p in d.points if p.key == "none"), None)
    chosen = (d.chosen.compile_s, d.chosen.latency_ms, d.chosen.key) if d.chosen else None
    return ParetoInfo(rows, [(p.compile_s, p.latency_ms, p.key) for p in front],
                      (eager.compile_s, eager.latency_ms) if eager else None, chosen)  # fmt: skip


class BreakevenInfo(NamedTuple):
    calls: list[int]
    lines: dict[str, list[float]]  # key -> a cold start and its calls, per number of calls
    crossings: dict[str, float]  # key -> calls after which it beats eager (inf: never)
    warm: dict[str, list[float]]  # the same after a warm start, where one is cheaper
    warm_crossings: dict[str, float]


def breakeven_info(d: StudyData) -> BreakevenInfo:
    """Time of one start and its calls, against calls, for the front and eager: after a cold
    start and after a warm one (a restart with the caches in place), and where each beats
    eager."""
    front = pareto(d.points)
    eager = next((p for p in d.points if p.key == "none"), None)
    lines = {p.key: [p.total_s(n) for n in CALLS] for p in front}
    warm = {p.key: [p.start_s("warm") + n * p.latency_ms / 1e3 for n in CALLS]
            for p in front if p.key != "none" and p.start_s("warm") < p.compile_s}  # fmt: skip
    if eager is not None:
        lines.setdefault("none", [eager.total_s(n) for n in CALLS])
    crossings, warm_crossings = {}, {}
    for p in front:
        if eager is None or p.key == "none":
            continue
        gain_s = (eager.latency_ms - p.latency_ms) / 1e3
        crossings[p.key] = p.compile_s / gain_s if gain_s > 0 else math.inf
        if p.key in warm:
            warm_crossings[p.key] = p.start_s("warm") / gain_s if gain_s > 0 else math.inf
    return BreakevenInfo(CALLS, lines, crossings, warm, warm_crossings)


class SpeedupRow(NamedTuple):
    key: str
    speedup: float
    shown: bool  # the interleaved rounds show it (sign test)


def speedup_info(d: StudyData) -> list[SpeedupRow]:
    """Speedup over eager of each feasible compiled trial, best first."""
    rows = [SpeedupRow(t.key, t.measurement.speedup or 0.0, gain(t.measurement) != 1.0)
            for t in d.trials if t.feasible and t.key != "none"]  # fmt: skip
    return sorted(rows, key=lambda r: -r.speedup)


class LatencyRow(NamedTuple):
    key: str
    samples_ms: list[float]


def latency_info(d: StudyData) -> list[LatencyRow]:
    """The raw latency samples of each trial that ran (eager first), for box plots."""
    rows = [LatencyRow(t.key, t.measurement.latency.samples_ms)
            for t in d.trials if t.measurement.latency]  # fmt: skip
    return sorted(rows, key=lambda r: (r.key != "none", statistics.median(r.samples_ms)))


class ParallelInfo(NamedTuple):
    """One column per axis, one row per trial that ran."""

    granularity: list[str]
    backend: list[str]
    mode: list[str]
    options: list[str]
    dynamic: list[str]
    fullgraph: list[str]
    compile_s: list[float]
    latency_ms: list[float]


def parallel_info(d: StudyData) -> ParallelInfo:
    """Strategy fields and both objectives, for the trials that ran."""
    ran = [t for t in d.trials if t.measurement.ok and t.measurement.latency
           and not t.measurement.deduced]  # fmt: skip
    return ParallelInfo(
        [t.strategy.granularity for t in ran], [t.strategy.backend for t in ran],
        [t.strategy.mode or "-" for t in ran],
        ["+".join(t.strategy.options) or "none" for t in ran],
        [str(t.strategy.dynamic) for t in ran], [str(t.strategy.fullgraph) for t in ran],
        [t.measurement.compile_s or 0.0 for t in ran],
        [t.measurement.latency.median_ms for t in ran],  # type: ignore[union-attr]
    )  # fmt: skip


class PhaseRow(NamedTuple):
    key: str
    dynamo_s: float
    backend_s: float  # AOT autograd and inductor, without its code generation
    codegen_s: float


def phases_info(d: StudyData) -> list[PhaseRow]:
    """Compile time split into dynamo and the backend (inductor's codegen within it)."""
    rows = []
    for t in d.trials:
        ph = t.measurement.phases
        if t.key == "none" or not ph:
            continue
        backend = ph.get("backend_s", 0.0)
        codegen = min(ph.get("codegen_s", 0.0), backend)
        rows.append(PhaseRow(t.key, ph.get("dynamo_s", 0.0), backend - codegen, codegen))
    return rows


class IssueRow(NamedTuple):
    key: str
    status: str
    breaks: int
    recompiles: int
    reasons: list[str]


def issues_info(d: StudyData) -> list[IssueRow]:
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
        status = "recompile limit hit" if status == "ok" and m.limit_hit else status
        rows.append(IssueRow(t.key, status, g.breaks if g else 0, g.recompiles if g else 0,
                             reasons))  # fmt: skip
    return sorted(rows, key=lambda r: (r.status == "ok", -r.breaks - r.recompiles))


def importance_info(
    store: Store, study: str, objectives: tuple[str, ...], storage: Any = None
) -> dict[str, float]:
    """Optuna's parameter importances for latency (read from Optuna's tables through
    ``storage``, or a storage made for the call), once there are enough completed trials."""
    import optuna

    from autotune.search.sampler import quiet_optuna

    latency = next(i for i, o in enumerate(objectives) if o in SPEEDS)
    quiet_optuna()
    try:
        s = optuna.load_study(study_name=study, storage=storage or store.url)
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
