"""The plan: what a search can afford in its time budget, learned from what it has paid here.

A time budget (``--time-budget``) bounds a whole search: the eager baseline, the trials and the
confirmation. Every search has a plan, built as it opens (:func:`autotune.search.open_search`);
its clock starts then (a worker's as it joins). What a call costs differs 15-20x between
machines, so the plan reads it here: a round's cost and the rest of a trial from the eager
baseline (whose rounds end at :data:`BASELINE_SHARE`), a compile's per backend from a prior
(:data:`COMPILE_PRIOR_S`) until a trial of it is measured. What can pay goes first
(:meth:`Plan.fitting`): the backends that replay the captured graph
(:data:`autotune.search.deduction.REPLAY`) wait until a trial that can beat eager has run. The
confirmation is kept a share only for the candidates that need it
(:func:`autotune.choice.confirm.needs_confirming`). Each trial's rounds end at its share of the
time left (less what a child does past its rounds), never before
:func:`~autotune.trial.timing.deciding_rounds`; a compile that runs past the time left is
stopped there. "Cannot decide anything" means no trial of the promising backend fits, and
names the budget that would (:meth:`Plan.decides_at`). A search without a budget has a plan
too: it only estimates, and cuts nothing (docs/search.md#the-time-budget).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autotune.choice.confirm import MIN_ROUNDS, RIVALS, needs_confirming
from autotune.search.deduction import AT_A_LEVEL, REPLAY, pays, priced_as
from autotune.trial.rungs import SHAPES
from autotune.trial.timing import deciding_rounds

if TYPE_CHECKING:
    from autotune.strategy import Strategy
    from autotune.trial.measurement import Measurement
    from autotune.workload import Settings

BASELINE_SHARE = 0.15  # of the budget, for the eager baseline's timed rounds
BASELINE_ROUNDS = 3  # ...at least: eager against itself decides nothing; its median needs some
FIRST_SHARE = 0.25  # of the budget, for its first pass over a traffic (past it, a sample)
# A cold compile before any of its backend is measured (another backend's: Inductor's): gemma-2b
# at 2 layers over a traffic took 25-60 s with Inductor on 2 cores; the others replay Python.
COMPILE_PRIOR_S = {"inductor": 40.0, "aot_eager": 4.0, "eager": 1.0}
WARM = 0.5  # a confirmation's compile, warm from the trial's caches, against the cold one
# Over a traffic, a round times each steady shape on both sides: where that makes the
# confirmation's least rounds cost more than this share of the budget, fewer shapes are timed.
CONFIRM_SHARE = 0.35
TAIL_S = 5.0  # the export and the answer, after the confirmation
AFTER_S = 0.5  # the least a trial's child takes past its rounds: its result saved, its exit
BEFORE = ("startup_s", "build_s", "first_s", "warmup_s", "timing_s")  # a child's, to its rounds
# Over a traffic, a compiled trial's first pass calls each new shape three times (eager, the
# compiled model, the probe whether it ran eager); the baseline's once: 100 s took 350 s there.
FIRST_PASS_CALLS = 3


def steady_share(m: Measurement) -> float:
    """What of its rounds' mean a baseline's typical round took: the median of its samples
    over their mean, never above 1. A burst of load during a few rounds inflates their mean
    (and the plan's every estimate after), never their median."""
    samples = m.latency.samples_ms if m.latency else []
    if len(samples) < 3 or (mean := statistics.fmean(samples)) <= 0:
        return 1.0
    return min(1.0, statistics.median(samples) / mean)


@dataclass
class Plan:
    """The budget of one search, and what it has learned of the costs here (seconds)."""

    budget_s: float | None
    started: float = field(default_factory=time.time)
    round_s: float | None = None  # one timed round: eager's call and the other side's
    fixed_s: float | None = None  # a trial's process, build, first pass, gate and save
    compiles: dict[str, list[float]] = field(default_factory=dict)  # backend -> seen
    iters: int = 0
    eager_ms: float = 0.0  # eager's latency per call here (weighted over a traffic)
    requests: int = 0  # a traffic's requests: a confirmation's server loop serves them all
    shapes: int = 0  # a traffic's steady shapes the baseline timed in a round
    steady: int = 0  # ...and those a trial's round times within the budget (0: as many)
    candidates: int = 0  # ...in the study, that need confirming (:func:`needs_confirming`)
    dearest: float = 0.0  # the dearest cold compile of those candidates (seconds)
    paid: bool = False  # a trial of a backend that can pay (:func:`pays`) has run in the study
    rungs: bool = False  # a compiled trial may stop after a cheap rung (autotune.trial.rungs)
    spent: dict[str, float] = field(default_factory=dict)  # where this run's time went
    # backend -> seconds a trial of it ran before an earlier run's budget stopped it: until
    # one of its trials is measured here, its compile costs at least that, less the fixed part
    floors: dict[str, float] = field(default_factory=dict)
    held: str = ""  # why no trial could start when the search stopped for time
    after_s: float = AFTER_S  # the most a trial's child took here past its rounds (seconds)

    @property
    def deadline(self) -> float | None:  # when the search must have ended (None: no budget)
        return None if self.budget_s is None else self.started + self.budget_s

    def left_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.time()

    def for_baseline(self, settings: Settings) -> Settings:
        """The baseline's settings: its rounds end at its share of the budget."""
        if self.budget_s is None:
            return settings
        start, budget = self.started, self.budget_s
        return dataclasses.replace(
            settings,
            deadline=start + BASELINE_SHARE * budget,
            least=BASELINE_ROUNDS,
            first_by=start + FIRST_SHARE * budget,
        )

    def learn_baseline(self, m: Measurement) -> None:
        """What the baseline showed of a call, of a round and of the rest of a trial (its
        process, build, first pass and gate; the reference's cost is the study's, once)."""
        t = m.timings
        rounds = max(1.0, t.get("rounds", float(self.iters or 1)))
        self.round_s = t.get("timing_s", 0.0) / rounds * steady_share(m)
        self.shapes = len((m.traffic or {}).get("steady") or [])
        if self.shapes and self.budget_s is not None:  # fewer shapes where rounds are dear
            per_shape = self.round_s / self.shapes
            afford = CONFIRM_SHARE * self.budget_s / ((1 + RIVALS) * MIN_ROUNDS * per_shape)
            self.steady = max(1, min(self.shapes, int(afford)))
            self.round_s = per_shape * self.steady
        self.fixed_s = max(0.0, t.get("startup_s", 0.0) + t.get("child_s", 0.0)
                           - t.get("timing_s", 0.0))  # fmt: skip
        if self.shapes:  # a compiled trial's first pass, and a confirmation's, call more
            sampled = (m.traffic or {}).get("sampled") or {}  # the shapes it left out, too
            first = t.get("first_s", 0.0)
            self.fixed_s += (first + sampled.get("estimated_s", 0.0)) * FIRST_PASS_CALLS - first
        self.eager_ms = m.latency.median_ms if m.latency else 0.0
        self.requests = int((m.traffic or {}).get("requests") or 0)
        self.learn_after(m)

    def learn_stored(self, measured: list[Measurement], stopped: dict[str, float]) -> None:
        """What earlier runs leave this one: candidates to confirm, whether a trial that can pay
        ran (or was ``stopped``, by backend: the floors of what the budget stopped)."""
        self.floors = stopped
        candidates = [m for m in measured if needs_confirming(m)]
        self.candidates += len(candidates)
        self.dearest = max([self.dearest, *(m.compile_s or 0.0 for m in candidates)])
        self.paid |= any(map(pays, (m.strategy for m in measured)))
        self.paid |= any(b not in REPLAY for b in stopped)

    def account(self, m: Measurement) -> None:
        """Count a measurement made in this run into :attr:`spent`: its compile, the rest of
        its first pass, its warm-up and timed rounds (and :meth:`learn_after`)."""
        t, compile_s = m.timings, m.compile_s or 0.0
        self.learn_after(m)
        for key, value in (
            ("compile", compile_s),
            ("first pass", max(0.0, t.get("first_s", 0.0) - compile_s)),
            ("steady state", t.get("warmup_s", 0.0) + t.get("timing_s", 0.0)),
        ):
            self.spent[key] = self.spent.get(key, 0.0) + value

    def learn_after(self, m: Measurement) -> None:
        """What a child took past its rounds (its probes, its artefact, its exit), the most."""
        if m.wall_s and "timing_s" in m.timings:  # its wall, less all up to its rounds' end
            self.after_s = max(self.after_s, m.wall_s - sum(m.timings.get(k, 0.0) for k in BEFORE))

    def split(self, total_s: float) -> dict[str, float]:
        """Where a run's ``total_s`` went, in seconds: compile, first pass, steady state,
        confirmation, reference, trials stopped at the budget (where any was), the worker
        processes (``search --workers K``: their trials), and the rest (processes, builds,
        gates, later starts, the storage)."""
        named = {
            k: round(self.spent.get(k, 0.0), 1)
            for k in ("compile", "first pass", "steady state", "confirmation", "reference")
        }
        if "stopped" in self.spent:  # trials stopped at the budget, measured nothing
            named["stopped at the budget"] = round(self.spent["stopped"], 1)
        if "workers" in self.spent:  # the trials ran in worker processes, not counted here
            named["worker processes"] = round(self.spent["workers"], 1)
        rest = total_s - sum(named.values())
        return {**named, "rest": round(max(0.0, rest), 1), "total": round(total_s, 1)}

    def compile_s(self, backend: str) -> float:
        """A cold compile's cost with ``backend`` (as :func:`priced_as` names it): what its
        trials took, else the prior (a level's: its backend's cost), or more if a trial of it
        ran longer before an earlier run's budget stopped it."""
        if seen := self.compiles.get(backend):
            return statistics.mean(seen)
        base = backend.removesuffix(AT_A_LEVEL)  # a level's backend
        prior = self.compile_s(base) if base != backend else COMPILE_PRIOR_S.get(backend, 40.0)
        return max(prior, self.floors.get(backend, 0.0) - (self.fixed_s or 0.0))

    def learn_trial(self, strategy: Strategy, m: Measurement, wall_s: float) -> None:
        """A measured trial's cost beyond the fixed part and its rounds (its cheap rung's
        own rounds too, where it timed them), as its backend's (:func:`priced_as`)."""
        self.account(m)
        if strategy.granularity == "none" or self.round_s is None or self.fixed_s is None:
            return
        self.paid |= pays(strategy)
        seen = self.compiles.setdefault(priced_as(strategy), [])
        if m.status == "stopped":  # at least this long, to its backend's estimate at once
            self.spent["stopped"] = self.spent.get("stopped", 0.0) + wall_s
            return seen.append(max(0.0, wall_s - self.fixed_s))
        if not m.ok:  # it failed before its compile ended (or never compiled): no cost learned
            return
        rounds = m.timings.get("rounds", float(self.iters))
        rung = self.rung_s() if m.rung else 0.0
        if m.rung == "cheap" and rung:  # it stopped there: its rounds were the rung's
            rounds = 0.0
        extra = max(0.0, wall_s - self.fixed_s - rung - rounds * self.round_s)
        seen.append(extra)
        if needs_confirming(m):  # a confirmation compiles it again, warm
            self.candidates += 1
            self.dearest = max(self.dearest, extra)

    def ruled_out(self, count: int) -> None:
        """``count`` candidates that a confirmation showed no faster than eager: no share of the
        budget is kept to confirm them again (:meth:`confirmation_s`)."""
        self.candidates = max(0, self.candidates - count)
        self.dearest = self.dearest if self.candidates else 0.0

    def rung_s(self) -> float:
        """What a trial's cheap rung adds over a traffic: its deciding rounds over a sample of
        :data:`autotune.trial.rungs.SHAPES` steady shapes, before the full rounds (at one
        shape, or where a round times no more shapes than that, they are the full rounds'
        first and add nothing; none where the trial times no more than the deciding rounds)."""
        timed = self.steady or self.shapes
        if not self.rungs or self.round_s is None or self.iters <= deciding_rounds():
            return 0.0
        return deciding_rounds() * self.round_s * SHAPES / timed if timed > SHAPES else 0.0

    def trial_s(self, backend: str, rounds: int) -> float:
        """A trial's cost here: the fixed part, its compile, a cheap rung's own rounds and
        ``rounds`` full ones."""
        assert self.round_s is not None and self.fixed_s is not None
        return self.fixed_s + self.compile_s(backend) + self.rung_s() + rounds * self.round_s

    def confirmation_s(self, backends: list[str], traffic: bool, timed: int = 0) -> float:
        """The confirmation's share now: nothing while no candidate needs confirming, else the
        candidates and the next trial's (undecided until it has run), at most the pick and
        :data:`RIVALS` rivals (``timed``: that many instead), each in a process of its own over
        a traffic (else all in one), each compile warm; over a traffic, each one's server loop
        too (:mod:`autotune.choice.as_served`: a process, a warm compile and every request)."""
        if self.round_s is None or self.fixed_s is None or not (self.candidates or timed):
            return 0.0
        rounds = MIN_ROUNDS  # its least: past them, its rounds take what is left
        timed = timed or min(1 + RIVALS, self.candidates + 1)  # strategies besides eager
        dearest = max(self.dearest, *(self.compile_s(b) for b in backends))
        compiles = WARM * timed * dearest
        if traffic:
            loop = self.fixed_s + self.requests * self.eager_ms / 1e3
            return timed * (self.fixed_s + rounds * self.round_s + loop) + 2 * compiles + TAIL_S
        sides = 1 + timed  # eager, the pick and its rivals, one call each a round
        return self.fixed_s + rounds * self.round_s * sides / 2 + compiles + TAIL_S

    def trials_end(self, backends: list[str], traffic: bool) -> float | None:
        """When the last trial must have ended for the confirmation to fit: the answer's tail
        at least, where nothing needs confirming yet or no confirmation fits what is left (the
        trials take it then; the pick rests on its trial's rounds)."""
        if self.deadline is None:
            return None
        keep = self.confirmation_s(backends, traffic)
        return self.deadline - (keep if TAIL_S < keep <= self.deadline - time.time() else TAIL_S)

    def promising(self, backends: list[str]) -> str:
        """The backend whose trial may change the pick most cheaply: the quickest to compile of
        those that can pay (:func:`pays`), else the quickest of all."""
        paying = [b for b in backends if b not in REPLAY] or backends
        return min(paying, key=self.compile_s)

    def least_s(self, backends: list[str]) -> float:
        """The least a trial that can decide costs here: the promising backend's deciding
        rounds until a trial that can pay has been measured, then any backend's."""
        held = not self.paid and self.budget_s is not None
        return min(self.trial_s(b, deciding_rounds())
                   for b in ([self.promising(backends)] if held else backends))  # fmt: skip

    def decides_at(self, backends: list[str]) -> float:
        """The smallest budget (seconds) that decides something here: what this run has spent
        so far (the baseline), the promising backend's trial at its deciding rounds, the tail."""
        return time.time() - self.started + self.least_s(backends) + TAIL_S

    def may_start(self, backends: list[str], traffic: bool) -> bool:
        """Whether one more trial that can decide fits (:meth:`least_s`) before the
        confirmation's share begins."""
        end = self.trials_end(backends, traffic)
        if end is None or self.round_s is None:
            return True
        return time.time() + self.least_s(backends) <= end

    def probe_fits(self, dear: str, backends: list[str], traffic: bool) -> bool:
        """Whether an eager-backend probe of a dear cell is worth its cost: the budget has room
        for the cell's ``dear`` trial after it (always, without a budget)."""
        end = self.trials_end(backends, traffic)
        if end is None or self.round_s is None:
            return True
        least = deciding_rounds()
        return time.time() + self.trial_s("eager", least) + self.trial_s(dear, least) <= end

    def fitting(self, strategies: list[Strategy], backends: list[str],
                traffic: bool) -> list[Strategy]:  # fmt: skip
        """Those of ``strategies`` whose trial fits before the confirmation's share at its
        backend's compile estimate (a stopped trial's included): what the sampler and the
        surrogate may propose; while no trial that can pay has been measured and one of them
        fits, not those that replay the captured graph (:data:`REPLAY`). All of them without
        a budget."""
        end = self.trials_end(backends, traffic)
        if end is None or self.round_s is None:
            return strategies
        left, least = end - time.time(), deciding_rounds()
        fit = [s for s in strategies if s.granularity == "none"
               or self.trial_s(priced_as(s), least) <= left]  # fmt: skip
        if not self.paid and any(pays(s) for s in fit):
            return [s for s in fit if s.granularity == "none" or pays(s)]
        return fit

    def for_trial(self, settings: Settings, backends: list[str], traffic: bool,
                  trials_left: int) -> Settings:  # fmt: skip
        """A trial's settings: its rounds end at its share of what is left for trials, and by
        its end less what its child does past them and a round (a last trial was stopped)."""
        end = self.trials_end(backends, traffic)
        if end is None:
            return settings
        share = (end - time.time()) / max(1, trials_left)
        last = end - self.after_s - (self.round_s or 0.0)
        return dataclasses.replace(settings, deadline=min(time.time() + share, last),
                                   stop_at=end, least=deciding_rounds(),
                                   steady=self.steady)  # fmt: skip

    def for_confirmation(self, settings: Settings) -> Settings:
        """The confirmation's settings: it ends by the budget's end less the tail, and its
        rounds by then less what its child does past them and a round's overshoot."""
        if self.deadline is None:
            return settings
        end = self.deadline - TAIL_S  # its rounds end where what follows them still fits
        last = end - self.after_s - (1 + RIVALS) * (self.round_s or 0.0)
        return dataclasses.replace(settings, deadline=last, stop_at=end, least=MIN_ROUNDS,
                                   steady=self.steady)  # fmt: skip
