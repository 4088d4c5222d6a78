"""Confirming the pick before it is exported.

A front built from one process per strategy can hold a point that is only noise (this
machine's latency swings several-fold from minute to minute), or miss one that noise hid. So
the chosen strategy is timed again against its nearest rivals (at most :data:`RIVALS`: the
front's first, then the fastest compiled strategies) and eager, interleaved in rounds in one
fresh process, warm from the compile caches their trials kept. Over a traffic, each is
measured as its trial measured it instead, in a process of its own (the first pass over the
traffic, then the steady state against its own eager): rivals sharing one model would share
its recompile limit and each other's graphs. Each compiled
strategy's latency then counts only as far as the rounds show it (sign test against eager); a
rival the rounds cannot tell from the pick ties with it; and the policy picks again from these
numbers, so a tie goes where the policy's tie rule sends it (the quicker compile, for every
policy but ``fastest`` on latency alone). Where it lands on a strategy the rounds did not
time, that one is confirmed in rounds of its own (:func:`passes`).

The rounds stop before :data:`MIN_ROUNDS` only where no strategy they time could be shown
faster than eager any more, even winning every round left (a curtailed sign test,
:func:`autotune.trial.timing.none_can_show`): what they decide is then what all the rounds
would decide, since a strategy not shown counts as eager whatever its rounds measured.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from autotune.choice.objectives import costs
from autotune.choice.selection import Point, pareto, pick
from autotune.errors import shorten
from autotune.trial.timing import ALPHA, sign_test

if TYPE_CHECKING:
    from autotune.catalog import ModelRef
    from autotune.trial.measurement import Measurement
    from autotune.workload import Settings, Workload

RIVALS = 2
PASSES = 3  # confirmations at most, each after the policy moved to an untimed strategy
# Rounds a confirmation times at least, whatever --iters says: at 6 rounds one lost round
# leaves a true 1.03x "not shown" (5 of 6: p = 0.22), and the binary answer of the same command
# flipped between runs; at 12, 10 wins of 12 still show it (p = 0.039).
MIN_ROUNDS = 12
Rounds = tuple[dict[str, list[float]] | None, float | str]


class Confirmable(Protocol):
    """What a confirmation reads of a study's spec (a ``StudySpec`` is one): the model and
    workload to time, the settings to time them with, and the policy that picks again."""

    @property
    def model(self) -> ModelRef: ...
    @property
    def workload(self) -> Workload: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def policy(self) -> str: ...
    @property
    def objectives(self) -> tuple[str, ...]: ...


def needs_confirming(m: Measurement) -> bool:
    """Whether a compiled trial's measurement ``m`` leaves a candidate to confirm: it passed the
    gate and its rounds put it faster than eager (shown by the sign test, or not yet decided).
    A trial whose rounds show it no faster needs no confirmation: eager beats or ties it."""
    if m.strategy.granularity == "none" or not m.feasible or m.speedup is None:
        return False
    return m.speedup > 1.0


def contenders(points: list[Point], front: list[Point]) -> list[Point]:
    """The points a confirmation may time: the front, and the fastest compiled points by their
    measured speedup (a noisy trial may have hidden a real one), at most :data:`RIVALS` more;
    never one whose trial measured it no faster than eager (it needs no confirmation)."""
    on = {p.key for p in front}
    fastest = sorted((p for p in points if p.key != "none" and p.key not in on
                      and p.speedup > 1.0),
                     key=lambda p: -p.speedup)[:RIVALS]  # fmt: skip
    return [*front, *fastest]


def rivals(chosen: Point, points: list[Point], front: list[Point],
           objectives: tuple[str, ...]) -> list[Point]:  # fmt: skip
    """The compiled contenders nearest ``chosen`` (objectives normalised over them): the
    front's first, at most :data:`RIVALS`; eager is timed in every confirmation anyway."""
    others = [p for p in contenders(points, front) if p.key not in (chosen.key, "none")]
    vals = [costs(p, objectives) for p in [chosen, *others]]
    spans = [max(v[i] for v in vals) - min(v[i] for v in vals) or 1.0
             for i in range(len(objectives))]  # fmt: skip
    here = costs(chosen, objectives)

    def distance(p: Point) -> float:
        there = costs(p, objectives)
        return math.hypot(*((a - b) / s for a, b, s in zip(here, there, spans, strict=True)))

    on = {p.key for p in front}
    return sorted(others, key=lambda p: (p.key not in on, distance(p)))[:RIVALS]


def _wins(faster: list[float], slower: list[float]) -> tuple[int, int]:
    """Rounds in which the first was quicker, out of those that were not ties."""
    pairs = [(a, b) for a, b in zip(faster, slower, strict=False) if a != b]
    return sum(a < b for a, b in pairs), len(pairs)


@dataclass
class Confirmation:
    """What the rounds showed, and the pick that follows from them."""

    chosen: str  # the study's pick before
    pick: str  # the pick after
    rounds: int
    wall_s: float
    lines: list[str] = field(default_factory=list)
    status: str = "ok"
    reason: str = ""
    latency_ms: dict[str, float] = field(default_factory=dict)  # confirmed, common scale
    speedup: dict[str, float] = field(default_factory=dict)  # as the rounds measured it

    @property
    def changed(self) -> bool:
        return self.pick != self.chosen

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def confirmed_points(points: list[Point], latency_ms: dict[str, float],
                     speedup: dict[str, float]) -> list[Point]:  # fmt: skip
    """The points with the confirmed strategies' latencies and speedups (a speedup that the
    rounds did not show counts as none in the latency)."""
    base = next((p.latency_ms for p in points if p.key == "none"), None)
    return [
        dataclasses.replace(p, latency_ms=latency_ms[p.key], speedup=speedup.get(p.key, p.speedup),
                            significant=base is not None and latency_ms[p.key] < base)
        if p.key in latency_ms else p
        for p in points
    ]  # fmt: skip


def settle(points: list[Point], chosen: Point, rounds_ms: dict[str, list[float]], policy: str,
           objectives: tuple[str, ...], planned: int = 0) -> Confirmation:  # fmt: skip
    """The policy's pick once the confirmed strategies' latencies are what the rounds show,
    and a confirmation that says so (its lines, the latencies and speedups; a strategy timed
    in fewer than the ``planned`` rounds stopped where no more could have shown it)."""
    eager = rounds_ms["none"]
    base = next((p.latency_ms for p in points if p.key == "none"), statistics.median(eager))
    confirmed: dict[str, float] = {}
    speedups: dict[str, float] = {}
    shown_keys: set[str] = set()
    lines = []
    for key, ms in rounds_ms.items():
        if key == "none":
            continue
        p = sign_test(eager, ms)
        won, n = _wins(ms, eager)
        shown = p < ALPHA and won > n / 2
        speedup = statistics.median(eager) / statistics.median(ms)
        confirmed[key] = base / speedup if shown else base
        if shown:
            shown_keys.add(key)
        speedups[key] = speedup
        word = "confirmed" if shown else "not shown"
        left = planned - len(ms)
        rest = "the round left" if left == 1 else f"the {left} rounds left"
        stopped = f"; stopped: {rest} could not have shown it" if 0 < len(ms) < planned else ""
        lines.append(f"{word}: {key} beat eager in {won} of {n} rounds (p = {p:.2g}, "
                     f"{speedup:.2f}x){stopped}")  # fmt: skip
    if chosen.key in confirmed:
        for key, ms in rounds_ms.items():
            if key in ("none", chosen.key):
                continue
            p = sign_test(rounds_ms[chosen.key], ms)
            won, n = _wins(rounds_ms[chosen.key], ms)
            tie = p >= ALPHA
            if tie and (key in shown_keys) == (chosen.key in shown_keys):  # else eager decides
                confirmed[key] = confirmed[chosen.key]
            lines.append(f"{chosen.key} vs {key}: quicker in {won} of {n} rounds (p = {p:.2g})"
                         + (": a tie" if tie else ""))  # fmt: skip
    after = pick(confirmed_points(points, confirmed, speedups), policy, objectives)
    if after.key != chosen.key:
        lines.append(f"the order did not hold: by the policy's tie rule the pick is {after.key}")
    return Confirmation(chosen.key, after.key, len(eager), 0.0, lines, latency_ms=confirmed,
                        speedup=speedups)  # fmt: skip


def rests_on(trial: Measurement | None) -> str:
    """What an unconfirmed compiled pick rests on: its trial's interleaved rounds against
    eager, how many, the sign test's p and the speedup ("" where its trial timed none)."""
    if trial is None or not (trial.latency and trial.eager_latency):
        return ""
    eager, ms = trial.eager_latency.samples_ms, trial.latency.samples_ms
    won, n = _wins(ms, eager)
    return (f"the pick rests on its trial's {len(ms)} rounds: it beat eager in {won} of {n} "
            f"(p = {sign_test(eager, ms):.2g}, {trial.speedup or 1.0:.2f}x)")  # fmt: skip


def unconfirmed(chosen: str, trial: Measurement | None, why: str) -> Confirmation:
    """A pick left unconfirmed (``why``: the budget ended first), saying what it rests on
    (:func:`rests_on`). It stays the pick: an unconfirmed candidate is named as such, never
    dropped."""
    lines = [f"not confirmed: {why}"]
    if chosen != "none" and (line := rests_on(trial)):
        lines.append(line)
    return Confirmation(chosen, chosen, 0, 0.0, lines, status="unconfirmed", reason=why)


def passes(points: list[Point], chosen: Point, front: list[Point], policy: str,
           objectives: tuple[str, ...], time_rounds: Callable[[list[str]], Rounds],
           where: str = "in one process", planned: int = 0) -> Confirmation:  # fmt: skip
    """Confirm ``chosen`` against its rivals; where the policy then picks a strategy the rounds
    did not time, confirm that one in a pass of its own (at most :data:`PASSES`), so that the
    exported pick is always one the rounds showed, or eager. ``time_rounds(keys)`` times the
    strategies ``keys`` and eager in one process: ``(rounds by key, wall seconds)``, or
    ``(None, why)`` when it could not; ``where`` says how they were timed, ``planned`` how
    many rounds each would take unless no more could show it faster than eager."""
    first, shown = chosen.key, Confirmation(chosen.key, chosen.key, 0, 0.0)
    for attempt in range(PASSES):
        others = rivals(chosen, points, front, objectives)
        keys = [p.key for p in [chosen, *others] if p.key != "none"]
        if not keys:
            shown.lines.append("nothing to confirm: no compiled strategy passed")
            shown.status = "skipped" if attempt == 0 else shown.status
            break
        rounds_ms, wall = time_rounds(keys)
        if rounds_ms is None:  # then ``wall`` says why, "status: reason"
            why = str(wall)
            shown.lines.append(f"not confirmed: the confirmation {shorten(why, 200)}; the pick "
                               "stands unconfirmed")  # fmt: skip
            if attempt == 0:
                shown.status, shown.reason = why.split(":")[0], why
            break
        result = settle(points, chosen, rounds_ms, policy, objectives, planned)
        shown.lines += result.lines
        shown.lines.append(f"confirmation: {result.rounds} rounds of {len(keys)} strategies and "
                           f"eager {where}, {float(wall):.1f} s")  # fmt: skip
        shown.rounds, shown.wall_s = shown.rounds + result.rounds, shown.wall_s + float(wall)
        shown.latency_ms.update(result.latency_ms)
        shown.speedup.update(result.speedup)
        shown.pick = result.pick
        points = confirmed_points(points, shown.latency_ms, shown.speedup)
        if result.pick == "none" or result.pick in shown.latency_ms:
            break
        chosen = next(p for p in points if p.key == result.pick)
        front = pareto(points, objectives)
        shown.lines.append(f"{result.pick} was not in those rounds: it is confirmed in rounds "
                           "of its own")  # fmt: skip
    if shown.pick != "none" and shown.latency_ms and shown.pick not in shown.latency_ms:
        timed = [p for p in points if p.key in shown.latency_ms or p.key == "none"]
        shown.pick = pick(timed, policy, objectives).key
        shown.lines.append(f"the pick is the policy's among the strategies the rounds timed: "
                           f"{shown.pick}")  # fmt: skip
    shown.chosen = first
    return shown


def confirm(spec: Confirmable, chosen: Point, points: list[Point], front: list[Point],
            kept: str | None = None) -> Confirmation:  # fmt: skip
    """Re-measure ``chosen`` against its nearest rivals and eager (see the module's text), in
    fresh processes warm from the caches kept under ``kept``."""
    from autotune.strategy import Strategy
    from autotune.trial import parent

    by_key = {p.key: p for p in points}
    planned = max(spec.settings.iters, MIN_ROUNDS)

    def time_rounds(keys: list[str]) -> Rounds:
        strategies = [Strategy.from_dict(by_key[k].strategy) for k in keys]
        caches = [parent.cache_folder(kept, k) for k in keys] if kept else []
        start = time.perf_counter()
        settings = dataclasses.replace(spec.settings, iters=planned)
        m = parent.confirm(spec.model, spec.workload, strategies, settings, caches)
        if not m.ok or not m.rounds:
            return None, f"{m.status}: {m.reason}"
        return m.rounds, time.perf_counter() - start

    where = ("over the traffic, each strategy with its own eager in a process of its own"
             if spec.workload.traffic else "in one process")  # fmt: skip
    return passes(points, chosen, front, spec.policy, spec.objectives, time_rounds, where, planned)
