"""``pad=auto``: the padding intervals a continuous-batching trial measures, chosen from a
pilot's measurements, as ``--buckets auto`` chooses edges (:mod:`autotune.trial.auto_buckets`).

Before the trial of a strategy whose batching says ``pad=auto``, a **pilot** measures its
sibling with intervals fitted to the traffic (:func:`pilot_of`: the query interval the longest
prompt's power of two, the KV interval the longest request's), cold, in a fresh process of its
own, in a few rounds. Its record holds eager's batches (a histogram of query tokens and cache
reads, with their seconds), its time to ready, its stalls and its time a request.
:func:`autotune.strategy.intervals.choose` prices every candidate pair of intervals over the
lifetime: the hour's requests at the traffic's arrival rate (a closed loop's: an hour back to
back at eager's time a request), as the default policy counts them. The trial then measures
the strategy with the cheapest pair, its ``edges`` ``((q,), (kv,))``. Its record's ``auto``
block holds the intervals, the pilot's figures, the cost predicted and the cost measured, and
says so where they differ by more than the noise (:func:`auto_buckets.measured`).
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import TYPE_CHECKING, Any

from autotune import arrivals
from autotune.strategy import Strategy, intervals
from autotune.strategy.batching import AUTO, Batching, Limits, fitted_intervals
from autotune.trial.auto_buckets import LIFETIME_S, pilot_runner
from autotune.trial.measurement import Measurement
from autotune.trial.reference import Reference
from autotune.workload import Settings, Workload

if TYPE_CHECKING:
    from autotune.catalog import ModelRef


def is_auto(strategy: Strategy) -> bool:
    return Batching.parse(strategy.batching).pad == AUTO


def pilot_of(strategy: Strategy, workload: Workload) -> Strategy:
    """The strategy whose trial prices ``strategy``'s intervals: the same, padded to intervals
    fitted to the traffic (those :func:`autotune.strategy.batching.candidates` fits)."""
    q, kv = fitted_intervals([s for _, s in workload.traffic], list(workload.answers))
    fitted = dataclasses.replace(Batching.parse(strategy.batching), pad="", q=q, kv=kv)
    return dataclasses.replace(strategy, batching=fitted.spell(), edges=None)


def priced(pilot: Measurement, sibling: Strategy, workload: Workload) -> tuple[
        list[intervals.Row], Limits, intervals.StepModel, dict[str, float]]:  # fmt: skip
    """From a pilot's measurement: eager's batches, the pilot's padding limits, the step model
    fitted to eager's batches, and the prices :func:`autotune.strategy.intervals.cost` takes;
    ``ValueError`` where the pilot measured too little to price anything."""
    c = (pilot.traffic or {}).get("continuous") or {}
    rows = [(int(q), int(p), int(n), float(s)) for q, p, n, s in c.get("batches") or []]
    if not rows or pilot.latency is None or pilot.eager_latency is None:
        raise ValueError(f"the pilot {sibling.batching} recorded no batches to price "
                         f"({pilot.status}: {pilot.reason[:200]})")  # fmt: skip
    model = intervals.StepModel.fit(rows)
    limits = Limits.of(Batching.parse(sibling.batching), int(c["config"]["num_blocks"]))
    stalls = c.get("stalls_s") or []
    rate = arrivals.rate_of(workload)
    eager_ms = pilot.eager_latency.median_ms
    prices = {
        "ready_s": float(c["ready_s"]),
        # a padded shape: what the pilot's stalls came to over its shapes (every graph a step
        # breaks into, recompiled); with none, what the warm-up paid for its one shape
        "stall_s": sum(stalls) / intervals.shapes(rows, limits) if stalls else float(c["ready_s"]),
        "request_ms": pilot.latency.median_ms,
        "work_s": model.work(rows, limits),
        "eager_ms": eager_ms,
        "real_s": model.work(rows),
        "steps": statistics.mean(workload.answers),  # a step a token, at least
        "requests": rate * LIFETIME_S if rate else LIFETIME_S * 1e3 / eager_ms,
    }
    return rows, limits, model, prices


def choose(strategy: Strategy, workload: Workload,
           pilot: Any) -> tuple[Strategy, dict[str, Any]]:  # fmt: skip
    """``strategy`` with its intervals, chosen from what ``pilot(pilot_of(strategy))``
    measured, and its record's ``auto`` block; ``ValueError`` where the pilot failed."""
    sibling = pilot_of(strategy, workload)
    m = pilot(sibling)
    if not m.ok:
        raise ValueError(f"the pilot {sibling.batching} {m.status}: {m.reason[:300]}")
    rows, limits, model, prices = priced(m, sibling, workload)
    (q, kv), predicted = intervals.choose(rows, limits, model, prices)
    block = {
        "intervals": [q, kv], "stall_s": prices["stall_s"], "model": model.to_dict(),
        "calls": prices["requests"], "lifetime_s": LIFETIME_S,
        "eager_ms": m.eager_latency.median_ms if m.eager_latency else None,
        "predicted": predicted, "batches": sum(n for _, _, n, _ in rows),
        "pilot": {"batching": sibling.batching, "wall_s": m.wall_s, "compile_s": m.compile_s,
                  "status": m.status, "cost": intervals.cost(rows, limits, model, prices)},
    }  # fmt: skip
    return dataclasses.replace(strategy, edges=((q,), (kv,))), block


def intervals_for(
    model: ModelRef, workload: Workload, strategy: Strategy, settings: Settings,
    reference: Reference | None, work: str,
) -> tuple[Strategy, dict[str, Any] | None]:  # fmt: skip
    """A ``pad=auto`` strategy with the intervals its pilot prices, and its record's ``auto``
    block; any other as it is."""
    if workload.kind != "continuous" or not is_auto(strategy) or strategy.edges:
        return strategy, None
    return choose(strategy, workload,
                  pilot_runner(model, workload, settings, reference, work))  # fmt: skip
