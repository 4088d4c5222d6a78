"""The search loop: steps until the study's budget, time or space runs out, reporting through a
:class:`Listener` (the CLI's progress bar, or plain lines), never printing itself."""

from __future__ import annotations

import time
from dataclasses import dataclass

from autotune.choice.selection import PER
from autotune.coordination import Tally, reap_s
from autotune.search import plan_line, step
from autotune.search.baseline import baseline
from autotune.search.plan import Plan
from autotune.search.state import Lines, Listener, Search


@dataclass
class Outcome:
    """How a search run ended: ``measured_here`` by this process; ``measured`` and ``deduced``
    strategies of the study's space in the whole study (what ``autotune studies`` shows)."""

    study: str
    measured_here: int
    measured: int
    deduced: int
    repeats: int
    stopped: str  # budget | time | exhausted | interrupted | worker limit | others finishing


def run(
    search: Search, listener: Listener | None = None, max_measure: int | None = None,
    leave: bool = False,
) -> Outcome:  # fmt: skip
    """Measure the baseline, then trials until the budget, time or space runs out (or, with
    ``max_measure``, until this process has measured that many). With ``leave``, stop
    (``others finishing``) instead of waiting when what is left is in live workers' hands: a
    worker serving a queue has other studies to measure."""
    listener = listener or Lines()
    baseline(search, listener)
    if search.plan.round_s is not None:
        per = PER.get(search.spec.workload.kind, "call")
        listener.note(plan_line.line(search.plan, search.target, search.backends,
                                     search.traffic, per))  # fmt: skip
    return trials(search, listener, max_measure, leave)


def trials(
    search: Search, listener: Listener, max_measure: int | None = None, leave: bool = False
) -> Outcome:
    """The trials of :func:`run`, its baseline measured: steps until the study's budget, time
    or space runs out (again after a confirmation that ruled its candidates out:
    :meth:`autotune.job.tuning.Tuning.finish`)."""
    measured = repeats = 0
    stopped = "budget"
    reaped = 0.0
    try:
        with search.coord.pulse:
            while True:
                tally = search.coord.tally(search.keys)
                if tally.stale or time.monotonic() - reaped >= reap_s():  # dead workers
                    own = {search.current} if search.current is not None else set()
                    step.db(search, lambda t=tally, o=own: search.coord.reap(search.optuna, t, o),
                            "reap")  # fmt: skip
                    reaped = time.monotonic()
                if not tally.unadopted & search.run_keys:  # none is left without a trial
                    if stop := stop_reason(search, tally, measured, max_measure):
                        stopped = stop
                        break
                    if tally.spent >= search.spec.trials or tally.claimed >= search.run_keys:
                        if leave and not tally.stale:  # nothing to reap: theirs to finish
                            stopped = "others finishing"
                            break
                        listener.now("waiting for other workers")  # the rest is in their hands
                        time.sleep(step.POLL_S)
                        continue
                key, what = step.step(search, tally, listener)
                repeats += what == "repeat"
                measured += what == "measured"
                if what == "measured":
                    listener.measured(key, len(search.measured()))
    except KeyboardInterrupt:
        stopped = "interrupted"
    if stopped in ("budget", "exhausted"):  # the study is done: no trial is left to claim
        tally = search.coord.tally(search.keys)
        step.db(
            search,
            lambda: search.coord.fail_unclaimed(search.optuna, set(tally.numbers)),
            "finish",
        )
    return outcome(search, measured, repeats, stopped)


def outcome(search: Search, measured_here: int, repeats: int, stopped: str) -> Outcome:
    tally = search.coord.tally(search.keys)
    return Outcome(search.name, measured_here, len(tally.measured), len(tally.deduced), repeats,
                   stopped)  # fmt: skip


def stop_reason(search: Search, tally: Tally, measured: int, limit: int | None) -> str | None:
    """Why this process stops now: the space settled, the budget of trials measured, this
    worker's limit, or its plan's time (no trial fits before the confirmation's share)."""
    if tally.settled >= search.run_keys:
        return "exhausted"
    if len(tally.measured) >= search.spec.trials:
        return "budget"
    if limit is not None and measured >= limit:
        return "worker limit"
    if search.plan.may_start(search.backends, search.traffic):
        return None
    hold(search.plan, search.backends, search.traffic)
    return "time"


def hold(plan: Plan, backends: list[str], traffic: bool) -> str:
    """Why no more trials start, said as the search stops for time (kept in ``plan.held`` for
    the summary's budget line)."""
    end = plan.trials_end(backends, traffic)
    room = 0.0 if end is None else max(0.0, end - time.time())
    plan.held = (f"a trial of {plan.promising(backends)} that could change the pick needs about "
                 f"{plan.least_s(backends):.0f} s, {room:.0f} s were left for trials")  # fmt: skip
    return plan.held
