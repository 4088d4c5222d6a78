"""A traffic's steady state: one call of each steady shape a round, weighted by the traffic,
and how many steady shapes a round may time before a deadline."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune import device, traffic

if TYPE_CHECKING:
    from autotune.trial.request import Request

Shape = tuple[int, int]


def weighted_call(
    step: dict[Shape, Callable[[], Any]],
    weights: dict[Shape, float],
    where: str,
    seen: dict[Shape, list[float]] | None = None,
) -> Callable[[], float]:
    """One call of every steady shape; the seconds weighted by the traffic (each shape's own
    seconds kept in ``seen``)."""

    def call() -> float:
        total = 0.0
        for shape, weight in weights.items():
            seconds = device.timed(step[shape], where)
            total += weight * seconds
            if seen is not None:
                seen.setdefault(shape, []).append(seconds)
        return total

    return call


def fitting_shapes(request: Request, eager_ms: list[float]) -> int:
    """How many steady shapes a round may time when nobody said (``request.steady`` 0): the
    traffic's default, or where the rounds have a deadline (the eager baseline under a time
    budget), as many as let the warm-up and the least rounds end by it, at the first pass's
    median eager call per shape on each side (never fewer than one). A baseline whose calls
    take seconds would otherwise time every steady shape through its least rounds, past any
    budget: 6.96 s a call over 8 shapes made one baseline 10 min 20 s of a 10 min budget.
    Eager untimed (a confirmation's first pass reads 0 ms) says nothing: the default."""
    per_round_and_shape = 2 * statistics.median(eager_ms) / 1e3 if eager_ms else 0.0
    if not request.deadline or per_round_and_shape <= 0:
        return traffic.STEADY_SHAPES
    rounds = max(1, request.warmup) + max(1, request.least)
    left = request.deadline - time.time()
    return max(1, min(traffic.STEADY_SHAPES, int(left / (rounds * per_round_and_shape))))
