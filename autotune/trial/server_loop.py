"""The server loop: the plain loop a user writes to serve a traffic with an exported strategy,
in a fresh process of its own, so that a confirmation can check that a trial measured what a
server sees (:mod:`autotune.choice.as_served`).

Eager's outputs of each distinct shape are computed first, on the model as built; then the
model goes through :func:`autotune.apply` with the exported file (the code a user runs:
buckets, marks, stance and recompile limit as the file says), and every request is played once,
in arrival order, with nothing in between: no eager call, no probe, no repeat. Each request's
figures are counted as it is served:

- the graphs it compiled and whether it hit a recompile limit: Dynamo's own counters and
  records (:func:`autotune.trial.metrics.compile_counts`);
- whether it ran eager: a compiled unit's own ``forward`` ran as Python during the served call
  itself (no counter of torch's records a frame that a stance or the limit ran eager);
- its outputs against eager's at its shape, under the study's accuracy gate (its reference
  where it covers the shape), and their shapes, so that a padded row is never served.
"""

from __future__ import annotations

import time
from typing import Any

from autotune import catalog, usercode
from autotune.trial import accuracy, metrics, recompiles
from autotune.trial.measurement import Measurement
from autotune.trial.request import Request
from autotune.trial.scenarios import begin, steps
from autotune.trial.scenarios.judged import judged_outputs, reference_name

Shape = tuple[int, int]


def shapes_of(out: Any) -> list[list[int]]:
    """The shape of every tensor in a model output, in order."""
    return [list(t.shape) for t in accuracy.tensors(out)]


def serve(request: Request) -> Measurement:
    """Play ``request``'s traffic through ``request.exported`` (see the module's text): per
    request, the graphs compiled, whether it ran eager, and where its outputs were wrong."""
    import torch

    import autotune

    assert request.exported is not None
    ctx = begin(request)
    ctx.phase("building the model")
    model, _ = catalog.build(ctx.ref, ctx.workload)
    requests = ctx.workload.traffic
    shapes: list[Shape] = list(dict.fromkeys(requests))
    inputs = {s: catalog.inputs_at(ctx.ref, model, ctx.workload, s) for s in shapes}
    given = {s: steps.keywords_for(model, inputs[s]) for s in shapes}
    expected: dict[Shape, tuple[list[Any], list[list[int]]]] = {}
    with torch.no_grad():  # eager's outputs first: no eager call between the served ones
        for s in shapes:
            out = model(*inputs[s], **given[s])
            expected[s] = (judged_outputs(out), shapes_of(out))
    strategy = ctx.strategy
    allowed = [strategy.backend] if usercode.is_code(strategy.backend) else None
    served = autotune.apply(model, request.exported, backends=allowed)
    units = recompiles.units_of(model, strategy.granularity)
    ctx.phase("serving the traffic in a plain loop")
    found: dict[str, Any] = {"compiles": [], "ran_eager": [], "limited": [], "wrong": []}
    last: dict[Shape, list[Any]] = {}  # the outputs of each shape last judged right
    began = time.perf_counter()
    for n, shape in enumerate(requests, 1):
        before = metrics.compile_counts()
        with recompiles.eager_blocks(units) as seen, torch.no_grad():
            out = served(*inputs[shape], **given[shape])
        after = metrics.compile_counts()
        found["compiles"].append(after[0] - before[0])
        if seen:
            found["ran_eager"].append(n)
        if after[1] > before[1]:
            found["limited"].append(n)
        if why := _wrong(ctx, shape, out, expected[shape], last):
            found["wrong"].append([n, why])
    found["served_s"] = time.perf_counter() - began
    found["graphs"] = metrics.compile_counts()[0]
    return Measurement(*request.base(), "ok", traffic=found, timings=ctx.timings)


def _wrong(ctx: Any, shape: Shape, out: Any, expected: tuple[list[Any], list[list[int]]],
           last: dict[Shape, list[Any]]) -> str:  # fmt: skip
    """Why one served output is not eager's at ``shape`` ("" where it is): its tensors'
    shapes, then the gate. Outputs equal to the last ones judged right at the shape are not
    judged again."""
    import torch

    outputs, eager_shapes = expected
    got = shapes_of(out)
    if got != eager_shapes:
        return f"output shapes {got}, eager's {eager_shapes}"
    actual = judged_outputs(out)
    same = last.get(shape)
    if same is not None and all(torch.equal(a, b) for a, b in zip(actual, same, strict=True)):
        return ""
    verdict = ctx.judge(outputs, actual, reference_name(shape))
    if not verdict.passed:
        return verdict.detail or "outside the accuracy gate"
    last[shape] = actual
    return ""
