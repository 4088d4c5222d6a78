"""The surrogate: what the strategies measured so far predict about those not measured yet.

A strategy is a set of factors (granularity, backend, mode, ``dynamic``, ``fullgraph`` and each
Inductor option that is on) and the pairs that most often interact (granularity with each other
factor, backend with ``dynamic``). Each objective, on a log scale, is modelled as a sum of one
effect per factor and pair (Bayesian linear regression: every effect starts at zero with a prior
spread, a pair's smaller than a single factor's). So what one trial shows is shared by every
strategy with the same factors: ``cpp_wrapper``'s gain measured at ``full`` is expected at
``regional`` too, until a trial there says otherwise. A strategy fails (or gives wrong outputs)
with a probability smoothed from the trials of its backend, then its granularity and backend,
then its ``dynamic``, and of each option it turns on.

The next strategy is the one whose measurement (drawn from the posterior, measuring noise included)
would add most, on average, to the hypervolume of the front found so far (expected improvement),
times its chance to run. The effects are fitted to the speedups as measured: one that a trial's
rounds do not show (its sign test) counts as none on the front, but fitted as none it would teach
the model that the trial's factors do nothing. The constants are set a priori, not fitted to a
record: a factor changes an objective by about x1.35, a pair by x1.16, and a measurement is noisy
by about x1.1 (identical compiles differ by 15-19 % in the records). ``spread`` scales the priors'
spreads; ``bench/efficiency.py`` chose the search's (``Tactics.spread``, 0.5: a factor x1.16, a
pair x1.08) among 0.5, 1 and 2 on leave-one-out replays of every record.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

import numpy as np

from autotune.choice.selection import Point, dominated
from autotune.search.deduction import cost
from autotune.strategy import OPTIONAL_DEFAULTS, Strategy

FACTOR_SD, PAIR_SD, NOISE_SD = 0.3, 0.15, 0.1  # log units: x1.35, x1.16, x1.1
DRAWS = 64  # samples of each strategy's predicted objectives, for its expected improvement
FAIL_PRIOR, FAIL_WEIGHT = 0.1, 2.0  # a failure rate's start, and how many trials it counts as


def factors(s: Strategy) -> list[str]:
    """A strategy's factors: one per field that applies, one per option that is on."""
    if s.granularity == "none":
        return ["eager"]
    fields = [f"g={s.granularity}", f"b={s.backend}", f"d={s.dynamic}", f"f={s.fullgraph}"]
    if s.backend == "inductor":
        fields.append(f"m={s.mode}")
    fields += [f"{n}={getattr(s, n)}" for n, default in OPTIONAL_DEFAULTS.items()
               if getattr(s, n) != default]  # fmt: skip
    return fields + [f"o={o}" for o in s.options]


def features(s: Strategy) -> list[str]:
    """Factors, and the pairs that most often interact: granularity with each other factor
    (a region compiles and runs differently), and backend with ``dynamic``."""
    one = factors(s)
    pairs = [(a, b) for a, b in itertools.combinations(one, 2)
             if a.startswith("g=") or (a.startswith("b=") and b.startswith("d="))]  # fmt: skip
    return one + [f"{a}&{b}" for a, b in pairs]


class SurrogateFit:
    """Bayesian linear regression of one objective (log scale) on the features."""

    def __init__(self, names: list[str], xs: list[list[str]], ys: list[float], spread: float
                 ) -> None:  # fmt: skip
        self.index = {n: i for i, n in enumerate(names)}
        prior = (spread * np.array([PAIR_SD if "&" in n else FACTOR_SD for n in names])) ** 2
        self.mean = float(np.mean(ys)) if ys else 0.0
        x = self.matrix(xs)
        precision = x.T @ x / NOISE_SD**2 + np.diag(1.0 / prior)
        self.cov = np.linalg.inv(precision)
        self.w = self.cov @ x.T @ (np.array(ys) - self.mean) / NOISE_SD**2

    def matrix(self, xs: list[list[str]]) -> np.ndarray:
        m = np.zeros((len(xs), len(self.index)))
        for row, names in enumerate(xs):
            for n in names:
                if n in self.index:
                    m[row, self.index[n]] = 1.0
        return m

    def predict(self, xs: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of each row's objective (log scale)."""
        x = self.matrix(xs)
        sd = np.sqrt(np.einsum("ij,jk,ik->i", x, self.cov, x))
        return self.mean + x @ self.w, sd


def hypervolume(points: Sequence[Sequence[float]], ref: Sequence[float]) -> float:
    """The volume the points dominate (minimising every objective) up to ``ref``."""
    pts = [tuple(p) for p in points if all(a < r for a, r in zip(p, ref, strict=True))]
    if not pts:
        return 0.0
    if len(ref) == 1:
        return ref[0] - min(p[0] for p in pts)
    pts.sort(key=lambda p: p[-1])
    volume = 0.0
    for i, p in enumerate(pts):  # slabs along the last objective
        top = pts[i + 1][-1] if i + 1 < len(pts) else ref[-1]
        if top > p[-1]:
            volume += hypervolume([q[:-1] for q in pts[: i + 1]], ref[:-1]) * (top - p[-1])
    return volume


def failure_chance(s: Strategy, tried: list[tuple[Strategy, bool]]) -> float:
    """How likely ``s`` is to fail, from the trials so far (``(strategy, failed)``): a rate
    smoothed from its backend's trials, then its granularity's, then its ``dynamic``'s (trials
    with options ``s`` lacks left out); and for each option it turns on, from that rate on to
    the option's trials, then the option's at this granularity. The largest of these."""

    def smoothed(start: float, *groups: list[bool]) -> float:
        for group in groups:
            start = (sum(group) + FAIL_WEIGHT * start) / (len(group) + FAIL_WEIGHT)
        return start

    def same(*fields: str, option: str | None = None) -> list[bool]:
        """The trials alike in ``fields``: with ``option`` on, or (for the cell) with no
        option that ``s`` does not turn on (their failure may be the option's)."""
        return [
            f
            for t, f in tried
            if all(getattr(t, n) == getattr(s, n) for n in fields)
            and (option in t.options if option else set(t.options) <= set(s.options))
        ]

    cell = smoothed(FAIL_PRIOR, same("backend"), same("granularity", "backend"),
                    same("granularity", "backend", "dynamic"))  # fmt: skip
    return max([cell] + [smoothed(cell, same(option=o), same("granularity", option=o))
                         for o in s.options])  # fmt: skip


def as_measured(points: Sequence[Point], objectives: tuple[str, ...]
                ) -> dict[Strategy, tuple[float, ...]]:  # fmt: skip
    """The values of the trials whose speedup their rounds do not show (the front counts it as
    none: eager's latency), with the speedup they measured: the evidence of what their factors
    do, which counted as none would say that they do nothing."""
    eager = next((p for p in points if p.key == "none"), None)
    return {
        Strategy.from_dict(p.strategy):
            dataclasses.replace(p, latency_ms=eager.latency_ms / p.speedup).values(objectives)
        for p in points if eager and p.key != "none" and not p.significant and p.speedup > 0
    }  # fmt: skip


def propose(
    values: dict[Strategy, tuple[float, ...]], failed: list[Strategy], free: list[Strategy],
    spread: float, evidence: dict[Strategy, tuple[float, ...]] | None = None,
    higher: Sequence[bool] = (),
) -> Strategy | None:  # fmt: skip
    """The free strategy most likely to add to the front of ``values`` (feasible strategies'
    objective values, eager included), or None when none is expected to add anything.
    ``spread`` scales the prior spreads of the effects; ``evidence``, where given, holds the
    values the effects are fitted to (as measured: a speedup that the front counts as none
    until its rounds show it is still the best estimate of what its factors do). Values are
    as measured, each modelled on a log scale; those ``higher`` marks (goodput) are better
    when higher, and the front compares their negative."""
    if not values or not free:
        return None
    tried = [(s, False) for s in values] + [(s, True) for s in failed]
    measured = [s for s in values if s.granularity != "none"]
    fitted = {**values, **(evidence or {})}
    names = sorted({n for s in [*measured, *free] for n in features(s)})
    k = len(next(iter(values.values())))
    floor = [1e-3 * max(max(v[i] for v in values.values()), 1e-9) for i in range(k)]
    fits = [
        SurrogateFit(names, [features(s) for s in measured],
            [math.log(fitted[s][i] + floor[i]) for s in measured], spread)
        for i in range(k)
    ]  # fmt: skip
    signs = [-1.0 if i < len(higher) and higher[i] else 1.0 for i in range(k)]

    def lower(v: Sequence[float]) -> tuple[float, ...]:
        return tuple(s * x for s, x in zip(signs, v, strict=True))

    costs = [lower(v) for v in values.values()]
    front = [v for v in costs if not dominated(v, costs)]
    lo = [min(v[i] for v in front) for i in range(k)]
    span = [max(v[i] for v in front) - lo[i] or 1.0 for i in range(k)]
    ref = [1.1] * k

    def scaled(v: Sequence[float]) -> tuple[float, ...]:
        return tuple((v[i] - lo[i]) / span[i] for i in range(k))

    base = [scaled(v) for v in front]
    now = hypervolume(base, ref)
    # what a measurement would show: the effects' uncertainty and the measuring noise
    candidates = [features(s) for s in free]
    predicted = [(m, np.sqrt(sd**2 + NOISE_SD**2))
                 for m, sd in (f.predict(candidates) for f in fits)]  # fmt: skip
    noise = np.random.default_rng(0).standard_normal((DRAWS, k))  # the same draws for all
    best, best_gain = None, 0.0
    for j, s in enumerate(free):
        draws = [[max(math.exp(m[j] + z[i] * sd[j]) - floor[i], 0.0)
                  for i, (m, sd) in enumerate(predicted)] for z in noise]  # fmt: skip
        expected = sum(hypervolume([*base, scaled(lower(d))], ref) - now for d in draws) / DRAWS
        gain = expected * (1 - failure_chance(s, tried))
        if gain > best_gain * (1 + 1e-9) or (
            best is not None and math.isclose(gain, best_gain) and cost(s) < cost(best)
        ):
            best, best_gain = s, gain
    return best if best_gain > 1e-12 else None
