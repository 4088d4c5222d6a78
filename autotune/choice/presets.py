"""A continuous study's pick beside transformers' continuous-batching presets
(``default_compile_level`` 0 to 3: eager, and the three ``batching=level=N`` anchors every such
search measures), each as measured, over the lifetime its policy counts."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from autotune.choice.selection import Point, lifetime_calls
from autotune.strategy import Strategy, batching

LEVELS = (0, *batching.LEVELS)


def level_of(strategy: dict[str, Any]) -> int | None:
    """The preset a stored strategy is (0: eager), or None for any other."""
    s = Strategy.from_dict(strategy)
    if s.granularity == "none":
        return 0
    return batching.level_of(s.batching) or None


def line(chosen: Point, points: list[Point], statuses: Iterable[tuple[dict[str, Any], str]],
         policy: str, stopped: Iterable[tuple[dict[str, Any], float]] = (),
         good: bool = False) -> str:  # fmt: skip
    """One line: each preset's lifetime cost (or why it has none: not feasible, stopped at the
    time budget, not measured) and the pick's against the best of them. ``statuses``: every
    stored trial's strategy and status; empty where the study has no preset (not a continuous
    study). ``stopped``: the strategies a time budget stopped, none measured since, and how
    long each ran (a preset's warm-up at transformers' 8,192 tokens may outlast a budget).
    ``good``: goodput is the study's speed, so a request costs ``1 / goodput`` as its policy
    counts it (:meth:`Point.total_s`)."""
    calls = lifetime_calls(policy, points)
    found = {level_of(p.strategy): p for p in points if level_of(p.strategy) is not None}
    failed = {level_of(s): status for s, status in statuses if level_of(s) is not None}
    for s, seconds in stopped:
        if (n := level_of(s)) is not None and n not in failed:
            failed[n] = f"stopped at the time budget after {seconds:.0f} s"
    if not found and not failed:
        return ""

    def cost(p: Point) -> float:
        return p.total_s(calls, good=good) if calls else p.latency_ms

    unit = "s" if calls else "ms"
    parts = []
    for n in LEVELS:
        name = "level 0 (eager)" if n == 0 else f"level {n}"
        if n in found and math.isinf(cost(found[n])):
            parts.append(f"{name} met the SLO on no request")
        elif n in found:
            parts.append(f"{name} {cost(found[n]):,.1f} {unit}")
        else:
            parts.append(f"{name} {failed.get(n, 'not measured')}")
    over = f"over {calls:,.0f} {chosen.per}s" if calls else "by latency"
    words = f"presets    {over}: {'; '.join(parts)}"
    if found:
        best = min(found.values(), key=cost)
        gain = cost(best) - cost(chosen)
        words += (f"; the pick {cost(chosen):,.1f} {unit}, {gain:,.1f} {unit} less than the best "
                  f"preset, level {level_of(best.strategy)}" if chosen.key != best.key
                  else "; the pick is the best preset")  # fmt: skip
    return words
