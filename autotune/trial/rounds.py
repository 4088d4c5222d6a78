"""The confirmation's child at one shape: eager and a few compiled strategies in one process, on
one model, timed in interleaved rounds (:mod:`autotune.choice.confirm` decides what the rounds
show). Over a traffic each rival is confirmed by a trial of its own instead
(:mod:`autotune.trial.scenarios.traffic_trial`, :func:`autotune.trial.parent.confirm`):
rivals on one model would share its code objects, so their recompile limit and each other's graphs.

The model is built once; each strategy compiles it (regional and nested make new trees that
share its parameters, so the strategies fit together), warm where the parent handed over their
kept compile caches. A train workload gives each strategy a copy of its own, as a step changes
the weights. Each round times one call of every strategy, in a random order; the rounds end
early only where no strategy could be shown faster than eager any more
(:func:`autotune.trial.timing.none_can_show`).
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable
from typing import Any

from autotune import catalog, device
from autotune.strategy import Strategy, granularity
from autotune.trial import timing
from autotune.trial.measurement import Measurement
from autotune.trial.scenarios import steps
from autotune.trial.scenarios.base import TrialContext
from autotune.trial.scenarios.generate import Generation, new_cache


def _call(ctx: TrialContext, model: Any, inputs: tuple, strategy: Strategy) -> Callable[[], Any]:
    """One timed call of ``strategy``: a step, or one generation's median decode step."""
    w = ctx.workload
    compiled = granularity.apply(model, strategy, traffic=w.traffic) if w.kind != "generate" else (
        granularity.generator(model, strategy))  # fmt: skip
    if w.kind != "generate":
        step = steps.make_step(compiled, inputs, w.kind)
        return lambda: device.timed(step, ctx.device)
    cache = new_cache(model, w) if strategy.granularity != "none" else None  # eager's own
    gen = Generation(compiled, cache, inputs[0], w.new_tokens, ctx.device)

    def generate() -> float:
        return statistics.median(gen.run().steps_s)

    return generate


def run(ctx: TrialContext) -> Measurement:
    """Time the request's ``confirm`` strategies and eager in its ``iters`` interleaved rounds;
    the measurement's ``rounds`` holds each one's milliseconds per round (eager as ``none``)."""
    m = ctx.result
    model, inputs = catalog.build(ctx.ref, ctx.workload)
    strategies = list(ctx.request.confirm)
    calls: dict[str, Callable[[], Any]] = {}
    t = ctx.start
    for s in [Strategy("none"), *strategies]:
        own = copy.deepcopy(model) if ctx.workload.kind == "train" else model
        calls[s.key] = _call(ctx, own, inputs, s)
        calls[s.key]()  # its first call: the compile (warm where caches were handed over)
        t = ctx.lap(f"first_{s.key}", t)
    for _ in range(max(1, ctx.request.warmup)):
        for call in calls.values():
            call()
    iters = ctx.request.iters
    samples = timing.interleave(
        calls,
        iters,
        lambda call: call(),
        ctx.seed,
        after_round=lambda done: timing.none_can_show(done, iters, "none"),
        deadline=ctx.request.deadline,
        least=ctx.request.least,
    )
    ctx.lap("timing_s", t)
    ctx.timings["rounds"] = float(timing.rounds_of(samples))
    m.rounds = {k: [v * 1e3 for v in values] for k, values in samples.items()}
    m.timings = ctx.timings
    return m
