"""The plan in one line, printed after the eager baseline: what a call and a trial cost here,
what fits in the budget, and what is kept to confirm (:class:`~autotune.search.plan.Plan`)."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import TYPE_CHECKING

from autotune.choice.confirm import RIVALS
from autotune.trial.timing import deciding_rounds

if TYPE_CHECKING:
    from autotune.search.plan import Plan


def line(plan: Plan, trials: int, backends: list[str], traffic: bool, per: str = "call") -> str:
    """The plan in one line: what a call (``per``: a token generated, a request served) and a
    trial cost here, and what fits."""
    assert plan.round_s is not None and plan.fixed_s is not None
    slowest = max(backends, key=plan.compile_s)
    trial = plan.trial_s(slowest, plan.iters)
    ms = plan.eager_ms
    call = f"{ms / 1e3:.3g} s" if ms >= 1e3 else f"{ms:.3g} ms"
    head = (
        f"plan: eager {call} per {per} here; a trial of {plan.iters} "
        f"rounds ≈ {trial:.0f} s ({plan.compile_s(slowest):.0f} s of it compiling)"
    )
    if plan.steady and plan.steady < plan.shapes:
        head += f"; each round times {plan.steady} of the traffic's {plan.shapes} shapes"
    if plan.deadline is None:
        return f"{head}; {trials} trials ≈ {trials * trial / 60:.1f} min (no time budget)"
    end = plan.trials_end(backends, traffic)
    assert end is not None and plan.budget_s is not None
    room = end - time.time()
    budget, kept = f"{plan.budget_s / 60:.3g} min", kept_to_confirm(plan, backends, traffic)
    if room >= trials * trial:
        every = "the 1 trial fits" if trials == 1 else f"{trials} trials fit"
        return f"{head}: {every} in {budget} ({kept})"
    least = plan.least_s(backends)  # as may_start
    if room < least:
        at = plan.decides_at(backends)
        return (f"{head}: the budget of {budget} cannot decide anything here (a trial of "
                f"{plan.promising(backends)} needs {least:.0f} s for {deciding_rounds()} "
                f"rounds, {max(room, 0):.0f} s are left); raise --time-budget to at least "
                f"{math.ceil(at / 60)}m")  # fmt: skip
    return (f"{head}: {max(int(room // trial), 1)} of {trials} trials fit in {budget} at "
            f"{plan.iters} rounds, up to {min(int(room // least), trials)} at "
            f"{deciding_rounds()} ({kept})")  # fmt: skip


def kept_to_confirm(plan: Plan, backends: list[str], traffic: bool) -> str:
    """The confirmation's share now, and what it grows to once trials show candidates
    (each one more process over a traffic): the plan line says both."""
    now = plan.confirmation_s(backends, traffic) / 60
    most = dataclasses.replace(plan, candidates=max(plan.candidates, 1 + RIVALS))
    grown = most.confirmation_s(backends, traffic) / 60
    if now == 0:
        return (f"nothing kept to confirm until a trial is faster than eager, up to "
                f"{grown:.1f} min then")  # fmt: skip
    later = f", up to {grown:.1f} min as more trials are faster than eager"
    return f"{now:.1f} min kept to confirm" + (later if f"{grown:.1f}" != f"{now:.1f}" else "")
