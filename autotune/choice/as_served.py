"""Served as measured: a traffic confirmation's self-check.

For each compiled strategy the rounds confirmed, a fresh process serves the traffic through the
strategy's export in a plain loop (:mod:`autotune.trial.server_loop`: ``autotune.apply``, every
request once in arrival order, Dynamo's counters), and what it counted is compared with what
the strategy's trial recorded, request by request: the graphs each compiled, the requests served
eager, and each request's outputs against eager's under the gate; over a generate traffic, the
times too: each warm request's TTFT and time per token against eager's in the loop's own
process, beside the same request's in the trial against the trial's eager (:func:`times`), within
the noise of the trial's rounds (:func:`noise`). Where all agree, the summary
says ``served as measured:`` with the counts. Where one differs, the strategy is not confirmed
(its latency counts as eager's, as for one the rounds did not show) and the summary names the
difference; the policy then picks again among the strategies the rounds timed. A loop that
does not fit what is left of the budget is not run, and its strategy is not confirmed either.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from autotune.choice.confirm import Confirmation, confirmed_points
from autotune.choice.selection import Point, pick
from autotune.errors import shorten
from autotune.trial.measurement import Measurement
from autotune.trial.metrics import LOADED

SHOWN = 3  # differences named per strategy; the rest counted
# The least tolerance of a served time against its trial's, as ratios to eager's in each one's
# own process: two processes' ratios agreed within 3 % (bench/served_loop.py), a loop's warm
# request is one generation, and the old trial's loop read 0.5x what `generate` takes.
# A warm request's TTFT in the trial's first pass is the first call at its prompt length on both
# sides, eager's too (in the loop, eager's is warm): two runs read 0.99x and 1.17x on one model.
TIME_FLOOR = {"tpot_ms": 0.25, "ttft_ms": 0.4}
TIMED = (("tpot_ms", "a token"), ("ttft_ms", "to the first token"))
LEAST_WARM = 3  # warm requests, at least, whose median times are compared


def _requests(numbers: list[int]) -> str:
    """Request numbers in a few words: ``1, 2, 4`` or ``1, 2, 4 and 9 more``."""
    head = ", ".join(str(n) for n in numbers[:8])
    return head + (f" and {len(numbers) - 8} more" if len(numbers) > 8 else "")


def differences(trial: dict[str, Any], loop: dict[str, Any]) -> list[str]:
    """Where a plain loop's counts (``loop``) differ from the trial's first pass (``trial``,
    both a measurement's ``traffic``), request by request, in words."""
    found = []
    was, now = trial.get("compiles") or [], loop.get("compiles") or []
    if len(was) != len(now):
        return [f"the trial played {len(was)} requests, the loop {len(now)}"]
    for n, (a, b) in enumerate(zip(was, now, strict=True), 1):
        if a != b:
            found.append(f"request {n} compiled {b} graph(s) in the loop, {a} in the trial")
    eager_was, eager_now = set(trial.get("ran_eager") or []), set(loop.get("ran_eager") or [])
    if only := sorted(eager_now - eager_was):
        found.append(f"requests {_requests(only)} ran eager in the loop, compiled in the trial")
    if only := sorted(eager_was - eager_now):
        found.append(f"requests {_requests(only)} ran compiled in the loop, eager in the trial")
    for n, why in loop.get("wrong") or []:
        found.append(f"request {n}'s outputs are not eager's: {shorten(why, 160)}")
    return found


def noise(trial: Measurement, key: str = "tpot_ms") -> float:
    """How far a served time (``key``) may stray from its trial's: the wider relative spread
    (interquartile range over the median) of the trial's timed rounds of it, eager's or its
    own, at least its :data:`TIME_FLOOR`."""
    sides = (trial.latency, trial.eager_latency) if key == "tpot_ms" else (
        trial.ttft, trial.eager_ttft)  # fmt: skip
    spreads = [lat.iqr_ms / lat.median_ms for lat in sides if lat and lat.median_ms > 0]
    return max(TIME_FLOOR[key], *spreads)


def ratios(trial: dict[str, Any], loop: dict[str, Any]) -> dict[str, tuple[float, float, int]]:
    """Per time (``tpot_ms``, ``ttft_ms``): the median over the warm requests (compiled and
    recorded nothing, on either side, and ran compiled on both) of the request's time over
    eager's at its shape, in the loop and in the trial, and how many; none where either side
    did not time them, or fewer than :data:`LEAST_WARM` requests were warm."""
    if "tpot_ms" not in loop or "eager_tpot_ms" not in trial:
        return {}
    skip = set(trial.get("ran_eager") or []) | set(loop.get("ran_eager") or [])
    none = [0] * len(loop["compiles"])
    sides = (loop["compiles"], trial.get("compiles") or none, trial.get("recorded") or none)
    cold = [any(x) for x in zip(*sides, strict=False)]
    warm = [i for i, c in enumerate(cold) if not c and i + 1 not in skip]
    if len(warm) < LEAST_WARM:
        return {}
    found = {}
    for key, _ in TIMED:
        base = f"eager_{key}"
        pairs = [(loop[key][i] / loop[base][i], trial[key][i] / trial[base][i])
                 for i in warm if loop[base][i] > 0 and trial[base][i] > 0]  # fmt: skip
        if pairs:
            found[key] = (statistics.median(a for a, _ in pairs),
                          statistics.median(b for _, b in pairs), len(pairs))  # fmt: skip
    return found


def load(trial: Measurement, loop: dict[str, Any]) -> float:
    """The largest share of the CPU other processes took while the trial played its requests
    or timed its rounds, or the loop served them (0 where none was read)."""
    t = trial.timings
    return max(t.get("others_cpu", 0.0), t.get("first_others_cpu", 0.0),
               loop.get("others_cpu", 0.0))  # fmt: skip


def times(trial: Measurement, loop: dict[str, Any]) -> list[str]:
    """Where a generate loop's warm requests' times, as ratios to eager's (:func:`ratios`),
    differ from the trial's by more than its noise (:func:`noise`), in words; none where
    other processes took more than :data:`~autotune.trial.metrics.LOADED` of the CPU on
    either side (said by :func:`agreed`, not judged, as the CI gate does)."""
    if load(trial, loop) > LOADED:
        return []
    found, got = [], ratios(trial.traffic or {}, loop)
    for key, what in TIMED:
        if key in got:
            served, measured, n = got[key]
            tolerance = noise(trial, key)
            if abs(served / measured - 1) > tolerance:
                found.append(f"its {n} warm requests took {served:.2f}x eager's time {what} in "
                             f"the loop, {measured:.2f}x in the trial (beyond the trial's noise, "
                             f"±{tolerance:.0%})")  # fmt: skip
    return found


def agreed(key: str, loop: dict[str, Any], wall_s: float,
           trial: dict[str, Any] | None = None, loaded: float = 0.0) -> str:  # fmt: skip
    """The line of a strategy whose loop agreed with its trial (``loaded``: the share of the
    CPU other processes took, where over :data:`LOADED`: its times said, not judged)."""
    compiles = loop["compiles"]
    at = [n for n, c in enumerate(compiles, 1) if c]
    eager = loop.get("ran_eager") or []
    where = f" at requests {_requests(at)}" if at else ""
    generated = loop.get("through") == "autotune.apply_generation"
    outputs = "request's tokens" if generated else "output"
    graphs = "1 graph" if sum(compiles) == 1 else f"{sum(compiles)} graphs"
    got = ratios(trial or {}, loop).get("tpot_ms")
    timing = (f", its {got[2]} warm requests at {got[0]:.2f}x eager's time a token (the trial: "
              f"{got[1]:.2f}x)") if got else ""  # fmt: skip
    if got and loaded > LOADED:
        timing += f", not judged: other processes took {loaded:.0%} of the CPU meanwhile"
    return (f"served as measured: {key}: {graphs} compiled{where}, "
            f"{len(eager)} of {len(compiles)} requests served eager, every {outputs} as eager's"
            f"{timing} (a plain loop through {loop.get('through', 'autotune.apply')} in a fresh "
            f"process, counted by Dynamo, {wall_s:.1f} s)")  # fmt: skip


def continuous_differences(trial: Measurement, loop: dict[str, Any]) -> list[str]:
    """Where a continuous loop (``loop``) differs from its trial: the graphs compiled after the
    warm-up, each request's tokens (against the trial's first pass), and, on a quiet machine,
    the median pass's TTFT and time per token beyond the trial's noise."""
    c = (trial.traffic or {}).get("continuous") or {}
    found = []
    if loop["graphs"] != c.get("graphs"):
        found.append(f"{loop['graphs']} graph(s) compiled after the warm-up in the loop, "
                     f"{c.get('graphs')} in the trial")  # fmt: skip
    was = c.get("first_tokens") or []
    if len(was) != len(loop["tokens"]):
        found.append(f"the trial played {len(was)} requests, the loop {len(loop['tokens'])}")
    for n, (a, b) in enumerate(zip(was, loop["tokens"], strict=False), 1):
        if a != b:
            found.append(f"request {n}'s tokens are not the trial's")
    if load(trial, loop) > LOADED:
        return found
    steady = c.get("steady", {}).get("compiled", {})
    for key, what in (("ttft_p50_ms", "to the first token"), ("tpot_p50_ms", "a token")):
        measured, served = steady.get(key), loop.get(key)
        tolerance = noise(trial, "ttft_ms" if key.startswith("ttft") else "tpot_ms")
        if measured and served and abs(served / measured - 1) > tolerance:
            found.append(f"its median pass took {served:.3g} ms {what} in the loop, "
                         f"{measured:.3g} ms in the trial (beyond its noise, "
                         f"±{tolerance:.0%})")  # fmt: skip
    return found


def continuous_agreed(key: str, trial: Measurement, loop: dict[str, Any], wall_s: float) -> str:
    """The line of a continuous strategy whose loop agreed with its trial."""
    said = (
        ""
        if load(trial, loop) <= LOADED
        else f", times not judged: other processes took {load(trial, loop):.0%} of the CPU"
    )
    return (f"served as measured: {key}: {loop['graphs']} graph(s) compiled after a warm-up of "
            f"{loop['ready_s']:.1f} s, every request's tokens as the trial's, TTFT "
            f"{loop['ttft_p50_ms']:.3g} ms and {loop['tpot_p50_ms']:.3g} ms a token at the "
            f"median pass{said} (a plain loop through {loop['through']} in a fresh process, "
            f"counted by Dynamo, {wall_s:.1f} s)")  # fmt: skip


def loop_s(trial: Measurement) -> float:
    """What a strategy's loop should take, from its trial: the trial's process less its
    timed rounds (the process, the build, the first pass, the gate), and the compiled model's
    call of every request the first pass did not play (a repeat, at its repeat latency)."""
    t, found = trial.timings, trial.traffic or {}
    played = set(found.get("played") or [])
    repeats = sum(ms for n, ms in enumerate(found.get("first_ms") or [], 1) if n not in played)
    rounds = t.get("warmup_s", 0.0) + t.get("timing_s", 0.0)
    eager = sum(found.get("eager_first_ms") or []) if "tpot_ms" in found else 0.0  # beside each
    return max(0.0, (trial.wall_s or 0.0) - rounds) + (repeats + eager) / 1e3


def prove(
    shown: Confirmation, points: list[Point], trials: dict[str, Measurement], policy: str,
    objectives: tuple[str, ...], serve: Callable[[str], Measurement],
    left_s: Callable[[], float | None] = lambda: None,
) -> Confirmation:  # fmt: skip
    """Check each compiled strategy ``shown`` confirmed against a plain server loop
    (``serve(key)``; see the module's text) and its trial (``trials[key]``), within what
    ``left_s()`` says is left of the budget; ``shown`` with the checks' lines, and the pick
    the policy makes once those that failed count as eager."""
    base = next((p.latency_ms for p in points if p.key == "none"), None)
    if base is None:
        return shown
    confirmed = [k for k, ms in shown.latency_ms.items() if k != "none" and ms < base]
    failed = []
    for key in sorted(confirmed, key=lambda k: k != shown.pick):  # the pick's first
        trial = trials[key]
        need, left = loop_s(trial), left_s()
        if left is not None and need > left:  # unchecked, not failed: its rounds stand
            shown.lines.append(f"not served yet: {key}: its plain loop needs about {need:.0f} s, "
                               f"{max(left, 0):.0f} s of the budget are left; its rounds stand, "
                               "unchecked as served")  # fmt: skip
            continue
        began = time.perf_counter()
        m = serve(key)
        wall = time.perf_counter() - began
        if not m.ok or m.traffic is None:
            failed.append(key)
            shown.lines.append(f"not served as measured: {key}: the plain loop {m.status}: "
                               f"{shorten(m.reason, 200)}; not confirmed")  # fmt: skip
            continue
        if "continuous" in m.traffic:  # many requests at once: counted over the traffic
            found = continuous_differences(trial, m.traffic["continuous"])
            if not found:
                shown.lines.append(continuous_agreed(key, trial, m.traffic["continuous"], wall))
                continue
        else:
            found = differences(trial.traffic or {}, m.traffic) + times(trial, m.traffic)
        if not found:
            shown.lines.append(agreed(key, m.traffic, wall, trial.traffic, load(trial, m.traffic)))
            continue
        failed.append(key)
        more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        shown.lines.append(f"not served as measured: {key}: {'; '.join(found[:SHOWN])}{more}; "
                           "not confirmed")  # fmt: skip
    if not failed:
        return shown
    for key in failed:
        shown.latency_ms[key] = base
    timed = [p for p in confirmed_points(points, shown.latency_ms, shown.speedup)
             if p.key in shown.latency_ms or p.key == "none"]  # fmt: skip
    after = pick(timed, policy, objectives).key
    if after != shown.pick:
        shown.lines.append(f"the pick is now {after}: {shown.pick} was not served as measured")
        shown.pick = after
    return shown
