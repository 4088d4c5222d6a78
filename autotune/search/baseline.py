"""What every trial of a study is judged against, measured once per study before the first
step (:mod:`.step`): the eager baseline (speedups) and the higher-precision reference
(accuracy). Whichever worker claims one measures it; the others wait for it, or read it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import AutotuneError, shorten
from autotune.search.step import db
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.trial.reference import Reference, keep, make

if TYPE_CHECKING:
    from autotune.search.state import Listener, Search


def baseline(search: Search, listener: Listener) -> Measurement:
    """The eager baseline, measured once per study (by whichever worker claims it), then
    :func:`ready` to judge trials by. One that failed (a timeout, OOM or crash) is measured
    again on resume."""
    import time

    if search.baseline is not None:
        return search.baseline
    coord = search.coord
    if reason := coord.forget_failed_baseline():
        listener.note(
            f"the eager baseline failed before ({shorten(reason, 200)}); measuring it again"
        )
    with coord.pulse:
        while (row := search.store.measurement(search.name, "none")) is None:
            if coord.claim("none", None, 1, set()) == "claimed":
                try:
                    listener.now("measuring the eager baseline")
                    m = search.measure(Strategy("none"))
                    if m.ok:  # the reference too, before peers that wait on the baseline
                        ready(search, m, listener)
                except BaseException:
                    with contextlib.suppress(Exception):
                        coord.release("none")  # interrupted: nobody is measuring it now
                    raise
                coord.record("none", None, m.to_dict())
                coord.done("none")
                continue
            tally = coord.tally({"none"})  # its worker may be dead
            db(search, lambda t=tally: coord.reap(search.optuna, t), "reap")
            listener.now("waiting for another worker's eager baseline")
            time.sleep(1.0)  # one cheap query: a worker joining a study starts soon
    m = Measurement.from_dict(row.payload)
    if not m.ok:
        raise AutotuneError(f"the eager baseline did not run ({m.status}): {m.reason}")
    search.baseline = m
    ready(search, m, listener)
    return m


def ready(search: Search, m: Measurement, listener: Listener) -> None:
    """What the baseline ``m`` tells this process's plan (once), then the study's reference,
    read or computed, where a trial fits the plan's budget (else it would judge nothing: a
    later run with more time computes it)."""
    import time

    plan = search.plan
    if plan.round_s is None:
        plan.learn_baseline(m)
        if sampled := (m.traffic or {}).get("sampled"):
            listener.note(sampled_line(sampled))
    if search.reference is not None or not plan.may_start(search.backends, search.traffic):
        return
    began = time.time()
    reference(search, listener)
    plan.spent.setdefault("reference", time.time() - began)


def sampled_line(sampled: dict) -> str:
    """What a baseline that sampled its traffic's first pass says."""
    return (f"the eager baseline's first pass played {sampled['timed']} of the traffic's "
            f"{sampled['shapes']} shapes (evenly spaced by size, keeping its mix; the others "
            f"estimated at their size): all of them would take about "
            f"{sampled['projected_s']:.0f} s, past its share of the time budget")  # fmt: skip


def reference(search: Search, listener: Listener) -> Reference:
    """The study's higher-precision reference: read from the storage (every worker judges
    against the same one), or computed once in a process of its own and stored there."""
    if search.reference is not None:
        return search.reference
    found = search.store.reference(search.name)
    if found is None:
        listener.now("computing the higher-precision reference")
        spec = search.spec
        made = make(spec.model, spec.workload, spec.settings)
        data = Path(made.path).read_bytes() if made.path else None
        search.store.add_reference(search.name, made.dtype, made.reason, data)
        found = search.store.reference(search.name)
        assert found is not None
    _, reason, data = found
    search.reference = keep(data) if data else Reference.none(reason)
    return search.reference
