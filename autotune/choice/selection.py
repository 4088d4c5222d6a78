"""Selection: from measured strategies to the one to use. Pure: it reads measurements, never
the store (callers pass what the store holds).

It owns the study's common latency scale, the sign test that decides whether a speedup counts,
the Pareto front and the policies (:mod:`autotune.choice.objectives` parses them):
- ``knee``: the Pareto point nearest the ideal point after normalising each objective (a tie
  goes to the quicker compile);
- ``fastest``: the lowest latency (a goodput study's too);
- ``quickest``: the lowest compile time among compiled strategies that are at least as fast as
  eager (a speedup >= 1 that the interleaved rounds show), else eager: a compile that buys
  nothing is never "quick";
- ``amortized:CALLS``: the lowest ``compile_s + CALLS * latency``; where goodput is an
  objective, a request costs ``1 / goodput`` instead (CALLS requests within the SLO, served at
  the point's goodput; none met: never);
- ``amortized:TIME`` (``1h``, ``30min``; the default is ``amortized:1h``): the same over the
  calls that TIME of serving makes back to back at eager's latency, so that a lifetime means
  the same on a CPU and a GPU (:func:`lifetime_calls`);
- ``restarts:STARTS:CALLS``: a service that starts STARTS times (one cold start, then later
  starts: the study's start objective when it is one, such as ``precompiled``, else warm) and
  makes CALLS calls per start: the lowest ``cold + (STARTS - 1) * later + STARTS * CALLS *
  latency`` (a request's ``1 / goodput`` where goodput is an objective);
- ``latency-budget:MS``: the quickest compile whose latency is within MS milliseconds.

The front and the knee compare each objective lower-is-better (:func:`~.objectives.costs`:
goodput by its negative); a point keeps every value as measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.choice.objectives import (
    START_KIND,
    costs,
    later_start,
    parse_policy,
    serving_calls,
    values,
)
from autotune.errors import AutotuneError
from autotune.start_kinds import LATER
from autotune.trial.measurement import Measurement
from autotune.trial.timing import ALPHA, sign_test

if TYPE_CHECKING:
    from autotune.storage import Stored


def gain(m: Measurement, alpha: float = ALPHA) -> float:
    """The speedup over eager if the interleaved rounds show it (sign test), else 1.0."""
    if m.speedup is None or not (m.latency and m.eager_latency):
        return 1.0
    p = sign_test(m.eager_latency.samples_ms, m.latency.samples_ms)
    return m.speedup if p < alpha else 1.0


def ttft_on_baseline(m: Measurement, baseline_ms: float | None) -> float | None:
    """A generate trial's prefill (time to first token) on the common scale, as
    :func:`latency_on_baseline` does for latency; None for other workloads."""
    if m.ttft is None:
        return None
    if baseline_ms is None or m.strategy.granularity == "none":
        return baseline_ms if baseline_ms is not None else m.ttft.median_ms
    if m.eager_ttft is None:
        return m.ttft.median_ms
    speedup = m.eager_ttft.median_ms / m.ttft.median_ms
    shown = sign_test(m.eager_ttft.samples_ms, m.ttft.samples_ms) < ALPHA
    return baseline_ms / (speedup if shown else 1.0)


def tokens_per_s_on_baseline(m: Measurement, baseline: float | None) -> float | None:
    """A generate trial's tokens a second on the common scale: the baseline's, times the
    trial's own ratio against its interleaved eager where its rounds showed a speedup (else
    the baseline's); None where either side's figure is missing (never a figure of another
    process beside the baseline's scale)."""
    if m.tokens_per_s is None or baseline is None:
        return None
    if m.strategy.granularity == "none":
        return baseline
    if not m.eager_tokens_per_s:
        return None
    return baseline * (m.tokens_per_s / m.eager_tokens_per_s if gain(m) != 1.0 else 1.0)


def latency_on_baseline(m: Measurement, baseline_ms: float | None) -> float:
    """A trial's latency on the study's common scale: the eager baseline over its gain.

    Trials run in different processes, whose speeds drift; each trial's speedup is measured
    against eager interleaved in its own process. Scaling one baseline by that speedup keeps
    cross-process noise out of the ranking, and a speedup the rounds do not show counts as none.
    """
    assert m.latency is not None
    if baseline_ms is None:
        return m.latency.median_ms
    if m.strategy.granularity == "none":
        return baseline_ms
    return baseline_ms / gain(m)


def objective_values(
    m: Measurement, objectives: tuple[str, ...], baseline: Measurement | None
) -> list[float]:
    """The values Optuna minimises for a measurement that ran (speeds on the common scale)."""
    return list(values(Point.of(m, None, baseline), objectives))


def measured_starts(m: Measurement) -> dict[str, float]:
    """Each later start's cost, where it was measured (not one that failed, nor a backend's
    that keeps no cache, recorded as its cold compile): a start not measured is absent, and
    :meth:`Point.start_s` counts it as cold."""
    return {kind: value for kind in LATER
            if (s := m.starts.get(kind)) is not None and s.measured
            and (value := m.start_s(kind)) is not None}  # fmt: skip


def goodput_of(m: Measurement) -> float | None:
    """A continuous trial's goodput (requests a second that met its workload's SLO) in its
    median steady pass, the pass its other figures come from: the strategy's side, or eager's
    own pass for eager; None without an SLO's targets or a continuous record."""
    if m.workload is None or not m.workload.slo:
        return None
    steady = ((m.traffic or {}).get("continuous") or {}).get("steady") or {}
    found = steady.get("eager" if m.strategy.granularity == "none" else "compiled") or {}
    return None if found.get("goodput") is None else float(found["goodput"])


PER = {"generate": "token", "continuous": "request"}  # a workload's latency: a cost per what


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
    later_s: dict[str, float] = field(default_factory=dict)  # a later start's cost, by kind
    ttft_ms: float | None = None  # generate: the prefill, on the common scale
    tokens_per_s: float | None = None  # generate: the whole generation, on the common scale
    limit_hit: bool = False  # dynamo hit its recompile limit: part of the model ran eager
    no_graphs: str = ""  # where a CUDA-graph strategy ran without them: all, or K of N graphs
    per: str = "call"  # what latency_ms is a cost of: a call, a decoded token, a request served
    goodput: float | None = None  # continuous with an SLO: requests/s that met it, as measured

    @classmethod
    def of(cls, m: Measurement, trial_number: int | None, baseline: Measurement | None) -> Point:
        assert m.latency is not None and m.compile_s is not None and m.speedup is not None
        memory = m.memory.compiled_peak_mb if m.memory else None
        key = m.strategy.key
        speedup = 1.0 if key == "none" else m.speedup
        base_ms = baseline.latency.median_ms if baseline and baseline.latency else None
        base_ttft = baseline.ttft.median_ms if baseline and baseline.ttft else None
        return cls(
            key, m.strategy.to_dict(), m.compile_s, latency_on_baseline(m, base_ms), memory,
            speedup, trial_number, m.latency.median_ms, key != "none" and gain(m) != 1.0,
            later_s=measured_starts(m),
            ttft_ms=ttft_on_baseline(m, base_ttft),
            tokens_per_s=tokens_per_s_on_baseline(m, baseline.tokens_per_s if baseline else None),
            limit_hit=m.limit_hit, no_graphs=m.without_cuda_graphs,
            per=PER.get(m.workload.kind if m.workload else "", "call"), goodput=goodput_of(m),
        )  # fmt: skip

    def total_s(self, calls: float, starts: float = 1, start: str = "compile",
                good: bool = False) -> float:  # fmt: skip
        """``starts`` starts of ``calls`` calls each: the first start cold, the others as
        ``start`` says (``compile`` = cold again, or a later start: ``warm``, ``portable``,
        ``precompiled``, ``aot``). ``good``: a call costs ``1 / goodput`` s, the time one
        request within the SLO takes at the point's goodput (none met: infinite)."""
        later = self.start_s(START_KIND.get(start, start))
        each_s = self.latency_ms / 1e3
        if good:
            each_s = 1 / self.goodput if self.goodput else math.inf
        per_start = calls * each_s
        return self.compile_s + (starts - 1) * later + starts * per_start

    def start_s(self, kind: str) -> float:
        """What one start of ``kind`` costs (a later start not measured counts as cold)."""
        return self.compile_s if kind == "cold" else self.later_s.get(kind, self.compile_s)

    def values(self, objectives: tuple[str, ...]) -> tuple[float, ...]:
        """The point's value of each objective, in order, as measured."""
        return values(self, objectives)

    def costs(self, objectives: tuple[str, ...]) -> tuple[float, ...]:
        """The point's values lower-is-better, as a front compares them (goodput negated)."""
        return costs(self, objectives)


def candidates(stored: Iterable[Stored], max_memory_mb: float | None = None,
               cheap: bool = False) -> list[Point]:  # fmt: skip
    """Every feasible measured strategy among a study's stored measurements, eager included
    (not those deduced from another: they repeat its numbers), nor those measured at a cheap
    rung's fidelity only (:mod:`autotune.trial.rungs`: never a pick), unless ``cheap``."""
    points = []
    rows = [r for r in stored if r.deduced_from is None]
    base = next((Measurement.from_dict(r.payload) for r in rows if r.key == "none"), None)
    baseline = base if base is not None and base.ok else None
    for row in rows:
        m = Measurement.from_dict(row.payload)
        if (not m.feasible and not (row.key == "none" and m.ok)) or (m.cheap and not cheap):
            continue
        point = Point.of(m, row.trial_number, baseline)
        if max_memory_mb is not None and (point.memory_mb or 0) > max_memory_mb:
            continue
        points.append(point)
    return points


def pareto(
    points: list[Point], objectives: tuple[str, ...] = ("compile", "latency")
) -> list[Point]:
    """The non-dominated points, sorted by compile time."""
    vals = [p.costs(objectives) for p in points]
    front = [p for p, v in zip(points, vals, strict=True) if not dominated(v, vals)]
    return sorted(front, key=lambda p: (p.compile_s, p.latency_ms))


def dominated(v: tuple[float, ...], others: Iterable[tuple[float, ...]]) -> bool:
    """Whether another of ``others`` is at least as good as ``v`` in every objective (and is
    not ``v``'s values): minimising all (costs, see :func:`~.objectives.costs`)."""
    return any(w != v and all(a <= b for a, b in zip(w, v, strict=True)) for w in others)


def pick(
    points: list[Point], policy: str, objectives: tuple[str, ...] = ("compile", "latency")
) -> Point:
    """The point a policy chooses; ``AutotuneError`` if none qualifies."""
    name, args = parse_policy(policy)
    if not points:
        raise AutotuneError("the study has no feasible trial to export")
    if name == "fastest":
        return min(points, key=lambda p: (p.latency_ms, p.compile_s))
    if name == "quickest":
        fast = [p for p in points if p.key != "none" and p.significant and p.speedup >= 1.0]
        eager = [p for p in points if p.key == "none"]
        return min(fast or eager or points, key=lambda p: (p.compile_s, p.latency_ms))
    good = "goodput" in objectives  # a request costs 1 / goodput: see the module's docstring
    if name in ("amortized", "serving"):
        calls = lifetime_calls(policy, points)
        assert calls is not None
        return min(points, key=lambda p: (p.total_s(calls, good=good), p.latency_ms))
    if name == "restarts":
        starts, calls = args
        kind = later_start(objectives)
        return min(points, key=lambda p: (p.total_s(calls, starts, kind, good), p.latency_ms))
    if name == "latency-budget":
        within = [p for p in points if p.latency_ms <= args[0]]
        if not within:
            best = min(p.latency_ms for p in points)
            raise AutotuneError(
                f"no strategy meets the latency budget of {args[0]:g} ms; the fastest takes "
                f"{best:.3g} ms"
            )
        return min(within, key=lambda p: (p.compile_s, p.latency_ms))
    return knee(pareto(points, objectives), objectives)


def eager_ms(points: list[Point]) -> float | None:
    """Eager's latency on the study's scale: the eager point's, else (eager left out, by a
    memory limit) the slowest point's, the nearest to it; None without points."""
    eager = next((p for p in points if p.key == "none"), None)
    if eager is not None:
        return eager.latency_ms
    return max((p.latency_ms for p in points), default=None)


def lifetime_calls(policy: str, points: list[Point]) -> float | None:
    """The calls a lifetime policy counts: ``amortized:CALLS``'s own, or for
    ``amortized:TIME`` the calls TIME of serving makes back to back at eager's latency
    (:func:`eager_ms`), resolved when the pick is made; None for the other policies."""
    name, args = parse_policy(policy)
    if name == "amortized":
        return args[0]
    ms = eager_ms(points) if name == "serving" else None
    return serving_calls(args[0], ms) if ms else None


def knee(front: list[Point], objectives: tuple[str, ...]) -> Point:
    """The front's point nearest the ideal after normalising each objective to [0, 1]."""
    vals = {id(p): p.costs(objectives) for p in front}
    lo = [min(v[i] for v in vals.values()) for i in range(len(objectives))]
    hi = [max(v[i] for v in vals.values()) for i in range(len(objectives))]

    def distance(p: Point) -> float:
        norm = [
            (v - lo[i]) / (hi[i] - lo[i]) if hi[i] > lo[i] else 0.0
            for i, v in enumerate(vals[id(p)])
        ]
        return math.hypot(*norm)

    # a tie (a front of two points always ties) goes to the quicker compile: the same distance
    # from the ideal buys nothing for the extra compile time
    return min(front, key=lambda p: (round(distance(p), 9), p.compile_s, p.latency_ms))


def choose(
    stored: Iterable[Stored], policy: str, objectives: tuple[str, ...],
    max_memory_mb: float | None = None,
) -> tuple[Point, list[Point], list[Point]]:  # fmt: skip
    """The chosen point, every candidate, and the Pareto front of a study's measurements."""
    points = candidates(stored, max_memory_mb)
    return pick(points, policy, objectives), points, pareto(points, objectives)
