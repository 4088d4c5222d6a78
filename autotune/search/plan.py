"""The plan: what a search can afford in its time budget, learned from what it has paid here.

A time budget (``--time-budget``) bounds a whole search: the eager baseline, the trials and the
confirmation. Every search has a plan, built as it opens (:func:`autotune.search.open_search`),
a lone search's and a worker's alike; its clock starts then (a worker's as it joins). What a
call costs differs 15-20x between machines (a dtype without native instructions, fewer cores),
so the plan reads it here:

- the eager baseline's timed rounds end at :data:`BASELINE_SHARE` of the budget, but never
  before :data:`BASELINE_ROUNDS` (eager against itself has nothing to decide);
- from the baseline come a round's cost (its timed rounds over their number, scaled to its
  median round, so that a burst of load in a few rounds does not inflate it) and what a trial
  costs besides its compile and its rounds (the process, the build, the first pass, the gate;
  over a traffic, a compiled trial's first pass at :data:`FIRST_PASS_CALLS` times the
  baseline's);
- a compile's cost per backend is a prior (:data:`COMPILE_PRIOR_S`) until a trial of that
  backend is measured, then the mean of what its trials took beyond the rest;
- the confirmation is kept its share first: its processes (the pick and its rivals, no more
  than the compiled strategies measured once the next trial is), each with a warm compile and the
  confirmation's own least rounds (:data:`autotune.choice.confirm.MIN_ROUNDS`); over a
  traffic, where those rounds would take more than :data:`CONFIRM_SHARE` of the budget, each
  round times fewer of its steady shapes (evenly spaced quantiles that keep its mix), and
  each strategy it confirms is served in a plain loop over every request, with a warm compile
  of its own (:mod:`autotune.choice.as_served`);
- each trial's rounds end at its share of the time left for trials, never before
  :func:`deciding_rounds`; a trial that cannot fit them is not started, and one whose compile
  runs past the time left for trials is stopped there (``Settings.stop_at``): the search goes
  on to its answer, and its backend's compile estimate counts at least that long at once;
- over a traffic, a trial's cheap rung (:mod:`autotune.trial.rungs`) times its own rounds over
  a sample of the steady shapes before the full ones: a trial's cost counts them
  (:meth:`Plan.rung_s`), so that a trial is started only where they fit too.

A search without a budget has a plan too: it only estimates, and cuts nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autotune.choice.confirm import MIN_ROUNDS, RIVALS
from autotune.trial.rungs import SHAPES
from autotune.trial.timing import ALPHA, sign_test

if TYPE_CHECKING:
    from autotune.strategy import Strategy
    from autotune.trial.measurement import Measurement
    from autotune.workload import Settings

BASELINE_SHARE = 0.15  # of the budget, for the eager baseline's timed rounds
BASELINE_ROUNDS = 3  # ...at least: eager against itself decides nothing; its median needs some
# A cold compile before any of its backend is measured: gemma-2b at 2 layers over a traffic
# took 25-60 s with Inductor on a 2-core CPU; the others trace or replay Python only.
COMPILE_PRIOR_S = {"inductor": 40.0, "aot_eager": 4.0, "eager": 1.0}
WARM = 0.5  # a confirmation's compile, warm from the trial's caches, against the cold one
# Over a traffic, a round times each steady shape on both sides: where that makes the
# confirmation's least rounds cost more than this share of the budget, fewer shapes are timed.
CONFIRM_SHARE = 0.35
TAIL_S = 5.0  # the export and the answer, after the confirmation
# Over a traffic, a compiled trial's first pass calls each new shape three times (eager's call,
# the compiled model's, and the probe that finds whether it ran eager); the baseline's, once.
# A first pass of 100 s in the baseline took 350 s in a compiled trial (bf16 without native
# instructions), 6.5 s took 20-24 s at 260 ms a call.
FIRST_PASS_CALLS = 3


@functools.cache
def deciding_rounds() -> int:
    """The fewest rounds whose sign test can show a difference at :data:`ALPHA` (every round
    one way): 6 at 0.05. Fewer rounds decide nothing, so no budget cuts below them."""
    n = 1
    while sign_test([1.0] * n, [0.0] * n) >= ALPHA:
        n += 1
    return n


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
    compiled: int = 0  # compiled strategies measured in this run (the confirmation's rivals)
    rungs: bool = False  # a compiled trial may stop after a cheap rung (autotune.trial.rungs)
    spent: dict[str, float] = field(default_factory=dict)  # where this run's time went
    # backend -> seconds a trial of it ran before an earlier run's budget stopped it: until
    # one of its trials is measured here, its compile costs at least that, less the fixed part
    floors: dict[str, float] = field(default_factory=dict)

    @property
    def deadline(self) -> float | None:
        """When the whole search must have ended (``time.time()``), or None without a budget."""
        return None if self.budget_s is None else self.started + self.budget_s

    def left_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.time()

    def for_baseline(self, settings: Settings) -> Settings:
        """The baseline's settings: its rounds end at its share of the budget."""
        if self.budget_s is None:
            return settings
        return dataclasses.replace(settings, deadline=self.started + BASELINE_SHARE
                                   * self.budget_s, least=BASELINE_ROUNDS)  # fmt: skip

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
            self.fixed_s += (FIRST_PASS_CALLS - 1) * t.get("first_s", 0.0)
        self.eager_ms = m.latency.median_ms if m.latency else 0.0
        self.requests = int((m.traffic or {}).get("requests") or 0)

    def account(self, m: Measurement) -> None:
        """Count a measurement made in this run into :attr:`spent`: its compile, the rest of
        its first pass, its warm-up and timed rounds."""
        t, compile_s = m.timings, m.compile_s or 0.0
        for key, value in (
            ("compile", compile_s),
            ("first pass", max(0.0, t.get("first_s", 0.0) - compile_s)),
            ("steady state", t.get("warmup_s", 0.0) + t.get("timing_s", 0.0)),
        ):
            self.spent[key] = self.spent.get(key, 0.0) + value

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
        """A cold compile's cost with ``backend``: what its trials took, else the prior, or
        what a trial of it ran before an earlier run's budget stopped it, if longer."""
        seen = self.compiles.get(backend)
        if seen:
            return statistics.mean(seen)
        prior = COMPILE_PRIOR_S.get(backend, COMPILE_PRIOR_S["inductor"])
        return max(prior, self.floors.get(backend, 0.0) - (self.fixed_s or 0.0))

    def learn_trial(self, strategy: Strategy, m: Measurement, wall_s: float) -> None:
        """A measured trial's cost beyond the fixed part and its rounds (its cheap rung's
        own rounds too, where it timed them), as its backend's."""
        self.account(m)
        if strategy.granularity == "none" or self.round_s is None or self.fixed_s is None:
            return
        if m.status == "stopped":  # at least this long, to its backend's estimate at once
            self.spent["stopped"] = self.spent.get("stopped", 0.0) + wall_s
            self.compiles.setdefault(strategy.backend, []).append(max(0.0, wall_s - self.fixed_s))
            return
        self.compiled += m.ok
        rounds = m.timings.get("rounds", float(self.iters))
        rung = self.rung_s() if m.rung else 0.0
        if m.rung == "cheap" and rung:  # it stopped there: its rounds were the rung's
            rounds = 0.0
        extra = max(0.0, wall_s - self.fixed_s - rung - rounds * self.round_s)
        self.compiles.setdefault(strategy.backend, []).append(extra)

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

    def confirmation_s(self, backends: list[str], traffic: bool) -> float:
        """The confirmation's share once one more trial is measured: the pick and up to
        :data:`RIVALS` rivals (no more than the compiled strategies measured by then), each in
        a process of its own over a traffic (else all in one), each compile warm; over a
        traffic, each one's server loop too (:mod:`autotune.choice.as_served`: a process, a
        warm compile and every request)."""
        if self.round_s is None or self.fixed_s is None:
            return 0.0
        rounds = MIN_ROUNDS  # its least: past them, its rounds take what is left
        timed = min(1 + RIVALS, self.compiled + 1)  # strategies it may time besides eager
        compiles = WARM * timed * max(self.compile_s(b) for b in backends)
        if traffic:
            loop = self.fixed_s + self.requests * self.eager_ms / 1e3
            return timed * (self.fixed_s + rounds * self.round_s + loop) + 2 * compiles + TAIL_S
        sides = 1 + timed  # eager, the pick and its rivals, one call each a round
        return self.fixed_s + rounds * self.round_s * sides / 2 + compiles + TAIL_S

    def kept_to_confirm(self, backends: list[str], traffic: bool) -> str:
        """The confirmation's share now, and what it grows to once the rivals it times are
        measured (each one more process over a traffic): the plan line says both."""
        now = self.confirmation_s(backends, traffic) / 60
        most = dataclasses.replace(self, compiled=max(self.compiled, RIVALS))
        grown = most.confirmation_s(backends, traffic) / 60
        later = f", up to {grown:.1f} min once its rivals are measured"
        return f"{now:.1f} min kept to confirm" + (later if f"{grown:.1f}" != f"{now:.1f}" else "")

    def trials_end(self, backends: list[str], traffic: bool) -> float | None:
        """When the last trial must have ended for the confirmation to fit."""
        if self.deadline is None:
            return None
        return self.deadline - self.confirmation_s(backends, traffic)

    def may_start(self, backends: list[str], traffic: bool) -> bool:
        """Whether one more trial fits (its deciding rounds, the cheapest backend's compile)
        before the confirmation's share begins."""
        end = self.trials_end(backends, traffic)
        if end is None or self.round_s is None:
            return True
        least = min(self.trial_s(b, deciding_rounds()) for b in backends)
        return time.time() + least <= end

    def fitting(self, strategies: list[Strategy], backends: list[str],
                traffic: bool) -> list[Strategy]:  # fmt: skip
        """Those of ``strategies`` whose trial fits before the confirmation's share at its
        backend's compile estimate (a stopped trial's included): what the sampler and the
        surrogate may propose. All of them without a budget."""
        end = self.trials_end(backends, traffic)
        if end is None or self.round_s is None:
            return strategies
        left, least = end - time.time(), deciding_rounds()
        return [s for s in strategies
                if s.granularity == "none" or self.trial_s(s.backend, least) <= left]  # fmt: skip

    def for_trial(self, settings: Settings, backends: list[str], traffic: bool,
                  trials_left: int) -> Settings:  # fmt: skip
        """A trial's settings: its rounds end at its share of what is left for trials."""
        end = self.trials_end(backends, traffic)
        if end is None:
            return settings
        share = (end - time.time()) / max(1, trials_left)
        return dataclasses.replace(settings, deadline=time.time() + share, stop_at=end,
                                   least=deciding_rounds(), steady=self.steady)  # fmt: skip

    def for_confirmation(self, settings: Settings) -> Settings:
        """The confirmation's settings: its rounds end by the budget's end, less the tail,
        but never before its own least rounds."""
        if self.deadline is None:
            return settings
        return dataclasses.replace(settings, deadline=self.deadline - TAIL_S,
                                   stop_at=self.deadline - TAIL_S, least=MIN_ROUNDS,
                                   steady=self.steady)  # fmt: skip

    def line(self, trials: int, backends: list[str], traffic: bool) -> str:
        """The plan in one line: what a call and a trial cost here, and what fits."""
        assert self.round_s is not None and self.fixed_s is not None
        slowest = max(backends, key=self.compile_s)
        trial = self.trial_s(slowest, self.iters)
        ms = self.eager_ms
        call = f"{ms / 1e3:.3g} s" if ms >= 1e3 else f"{ms:.3g} ms"
        head = (
            f"plan: eager {call} per call here; a trial of {self.iters} "
            f"rounds ≈ {trial:.0f} s ({self.compile_s(slowest):.0f} s of it compiling)"
        )
        if self.steady and self.steady < self.shapes:
            head += f"; each round times {self.steady} of the traffic's {self.shapes} shapes"
        if self.deadline is None:
            return f"{head}; {trials} trials ≈ {trials * trial / 60:.1f} min (no time budget)"
        end = self.trials_end(backends, traffic)
        assert end is not None and self.budget_s is not None
        room = end - time.time()
        budget, kept = f"{self.budget_s / 60:.3g} min", self.kept_to_confirm(backends, traffic)
        if room >= trials * trial:
            every = "the 1 trial fits" if trials == 1 else f"{trials} trials fit"
            return f"{head}: {every} in {budget} ({kept})"
        least = min(self.trial_s(b, deciding_rounds()) for b in backends)  # as may_start
        if room < least:
            return (f"{head}: the budget of {budget} cannot decide anything here (a trial "
                    f"needs {least:.0f} s for {deciding_rounds()} rounds, {max(room, 0):.0f} s "
                    "are left before the confirmation); raise --time-budget")  # fmt: skip
        return (f"{head}: {max(int(room // trial), 1)} of {trials} trials fit in {budget} at "
                f"{self.iters} rounds, up to {min(int(room // least), trials)} at "
                f"{deciding_rounds()} ({kept})")  # fmt: skip


def backends_of(members: list[Strategy]) -> list[str]:
    """The backends of the compiled strategies of a space (eager's if none)."""
    found = sorted({s.backend for s in members if s.granularity != "none"})
    return found or ["eager"]
