"""``--buckets auto``: the edges an ``auto`` trial measures, chosen from a pilot's measurements.

Before the trial of an ``auto`` (or ``auto:K``) strategy, a **pilot** measures its sibling that
pads to powers of two (the same compile, ``buckets=pow2``), cold, in a fresh process of its own,
over the same traffic, in a few rounds: what one bucket's compile costs (the median stall of
the requests whose first arrival compiled a bucket) and the compiled latency of each steady
shape at its padded size. A latency model affine in padded tokens
(:class:`autotune.strategy.edges.LatencyModel`) is fitted to those, and
:func:`autotune.strategy.edges.choose` picks the edges of least cost over the default lifetime,
one hour of serving back to back at eager's speed (the pilot's eager latency). The trial then
measures the strategy with those edges as any bucket kind. Its traffic record's ``auto`` block
holds the edges, the pilot's figures, the cost predicted and the cost measured (the trial's
stalls plus the lifetime's calls at its steady latency), and says so where the two differ by
more than the noise (:data:`NOISE`).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.strategy import Strategy
from autotune.strategy import edges as chosen_edges
from autotune.strategy.shapes import bucket_of
from autotune.trial.measurement import Measurement
from autotune.trial.process import run_child
from autotune.trial.reference import Reference
from autotune.trial.request import Request
from autotune.workload import Settings, Workload

if TYPE_CHECKING:
    from autotune.catalog import ModelRef

LIFETIME_S = 3600.0  # the lifetime policy's default: one hour of serving at eager's speed
PILOT_ITERS = 5  # the pilot's timed rounds: its steady latencies fit a line, nothing more
# Measured and predicted costs differ by more than this share before the trial says so: cold
# compiles of one strategy vary by up to a third between runs here (bench/gate_noise.py).
NOISE = 0.35


def is_auto(strategy: Strategy) -> bool:
    return strategy.buckets.startswith("auto")


def pilot_of(strategy: Strategy) -> Strategy:
    """The strategy whose trial prices ``strategy``'s buckets: the same, padded to powers of
    two."""
    return dataclasses.replace(strategy, buckets="pow2", edges=None)


def priced(pilot: Measurement) -> tuple[float, chosen_edges.LatencyModel, float]:
    """From a pilot's measurement: one bucket's compile (s), the latency model of padded shapes
    and eager's latency (ms a request, weighted by the traffic); ``ValueError`` where the
    pilot measured too little to price anything."""
    t = pilot.traffic or {}
    stalls = [ms for ms, c in zip(t.get("stall_ms") or [], t.get("compiles") or [], strict=False)
              if c]  # fmt: skip
    if not stalls or not t.get("steady") or pilot.eager_latency is None:
        raise ValueError(f"the pow2 pilot measured no compile to price ({pilot.status}: "
                         f"{pilot.reason[:200]})")  # fmt: skip
    points = [(bucket_of((row["batch_size"], row["seq_len"]), None), row["compiled_ms"])
              for row in t["steady"] if not row.get("ran_eager")]  # fmt: skip
    model = chosen_edges.LatencyModel.fit(points)
    return statistics.median(stalls) / 1e3, model, pilot.eager_latency.median_ms


def choose(
    strategy: Strategy, requests: tuple[tuple[int, int], ...],
    pilot: Callable[[Strategy], Measurement],
) -> tuple[Strategy, dict[str, Any]]:  # fmt: skip
    """``strategy`` with its edges, chosen from the measurement ``pilot(pilot_of(strategy))``
    returns, and the ``auto`` block of its trial's record (see the module's text); a
    ``ValueError`` where the pilot failed."""
    m = pilot(pilot_of(strategy))
    if not m.ok:
        raise ValueError(f"the pow2 pilot {m.status}: {m.reason[:300]}")
    stall_s, model, eager_ms = priced(m)
    calls = LIFETIME_S * 1e3 / eager_ms
    most = chosen_edges.parse(strategy.buckets) or chosen_edges.MOST
    found = chosen_edges.choose(requests, stall_s, model, calls, most)
    predicted = chosen_edges.cost(requests, lambda r: bucket_of(r, found), stall_s, model, calls)
    pow2 = chosen_edges.cost(requests, lambda r: bucket_of(r, None), stall_s, model, calls)
    block = {
        "edges": [list(found[0]), list(found[1])], "stall_s": stall_s, "model": model.to_dict(),
        "calls": calls, "lifetime_s": LIFETIME_S, "eager_ms": eager_ms, "predicted": predicted,
        "pow2": pow2,
        "pilot": {"wall_s": m.wall_s, "compile_s": m.compile_s, "status": m.status},
    }  # fmt: skip
    return dataclasses.replace(strategy, edges=found), block


def measured(m: Measurement, block: dict[str, Any]) -> dict[str, Any]:
    """``block`` with the cost the trial measured beside the predicted one: its stalls plus the
    lifetime's calls at its steady latency, on the pilot's scale (times the pilot's eager
    latency over the trial's, so that a machine busier in one process than in the other does
    not count as a miss), and a note where they differ by more than :data:`NOISE`."""
    if not m.ok or m.latency is None or m.compile_s is None or m.eager_latency is None:
        return block
    mean_ms = m.latency.median_ms * block["eager_ms"] / m.eager_latency.median_ms
    total = m.compile_s + block["calls"] * mean_ms / 1e3
    predicted = block["predicted"]["total_s"]
    off = total / predicted - 1 if predicted else 0.0
    block = {**block, "measured": {"stalls_s": m.compile_s, "mean_ms": mean_ms,
                                   "total_s": total}}  # fmt: skip
    if abs(off) > NOISE:
        block["note"] = (f"the measured cost over {block['lifetime_s'] / 3600:g} h, "
                         f"{total:.0f} s, is {abs(off):.0%} {'above' if off > 0 else 'below'} "
                         f"the predicted {predicted:.0f} s: more than the noise "
                         f"({NOISE:.0%}); the pilot's latency model or compile price does "
                         "not hold for what it chose")  # fmt: skip
    return block


def pilot_runner(
    model: ModelRef, workload: Workload, settings: Settings, reference: Reference | None,
    work: str,
) -> Callable[[Strategy], Measurement]:  # fmt: skip
    """A pilot: a strategy measured cold in a child of its own under ``work``, in a few
    rounds (:data:`PILOT_ITERS`), its cold start alone."""
    quick = dataclasses.replace(settings, iters=min(settings.iters, PILOT_ITERS),
                                warmup=1, starts=("cold",))  # fmt: skip

    def pilot(sibling: Strategy) -> Measurement:
        ask = Request.trial(model, workload, sibling, quick, reference).but(kind="pilot")
        return run_child(ask, work, "pilot", os.path.join(work, "pilot"), quick)

    return pilot


def edges_for(
    model: ModelRef, workload: Workload, strategy: Strategy, settings: Settings,
    reference: Reference | None, work: str,
) -> tuple[Strategy, dict[str, Any] | None]:  # fmt: skip
    """An ``auto`` buckets strategy with the edges its pilot prices
    (:mod:`autotune.trial.auto_buckets`), and its record's ``auto`` block; any other as it
    is. The pilot runs cold in a child of its own, in a few rounds."""
    if not is_auto(strategy) or strategy.edges or not workload.traffic:
        return strategy, None
    return choose(strategy, workload.traffic,
                  pilot_runner(model, workload, settings, reference, work))  # fmt: skip
