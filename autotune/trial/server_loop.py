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

A generate traffic's loop (:func:`generate`) is the one a user writes with
:func:`autotune.apply_generation`: one ``generate`` a request, its greedy tokens against eager's,
each request's TTFT and time per token as its tokens arrive (:mod:`.scenarios.served`), and
eager's own ``generate`` (its default cache) of the same request right after it, in the same
process: a ratio that a load on the machine, or a slower process, moves on both sides alike.
Eager's calls run the model's own forward: Dynamo's counters of the served one do not move.
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
    if request.workload.kind == "generate":
        return generate(request)
    if request.workload.kind == "continuous":
        return continuous(request)
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
    found["through"] = "autotune.apply"
    return Measurement(*request.base(), "ok", traffic=found, timings=ctx.timings)


def generate(request: Request) -> Measurement:
    """A generate traffic's plain loop: eager's greedy tokens of each prompt first (the model's
    own ``generate``, its default cache); then each request one ``generate(ids,
    max_new_tokens=n)`` on ``autotune.apply_generation(model, exported)``, in arrival order;
    per request the graphs it compiled, whether it hit the recompile limit (its calls then ran
    eager), whether its tokens are eager's, its TTFT and time per token, and eager's (one
    ``generate`` of the same request after it)."""
    import autotune
    from autotune.trial.scenarios import served as timed

    assert request.exported is not None
    ctx = begin(request)
    ctx.phase("building the model")
    w = ctx.workload
    model, _ = catalog.build(ctx.ref, w)
    prompts = {s: catalog.inputs_at(ctx.ref, model, w, s)[0] for s in dict.fromkeys(w.traffic)}
    longest = {s: max(n for r, n in zip(w.traffic, w.answers, strict=True) if r == s)
               for s in prompts}  # fmt: skip
    expected = {}
    decoding = timed.Decoding.of(w, request.seed)
    for s, ids in prompts.items():  # eager's tokens first
        run = timed.run(model, ids, longest[s], w.device, logits=True, decoding=decoding)
        expected[s] = (run.tokens, run.margins)
    strategy = ctx.strategy
    allowed = [strategy.backend] if usercode.is_code(strategy.backend) else None
    served = autotune.apply_generation(model, request.exported, backends=allowed)
    ctx.phase("serving the traffic in a plain generate loop")
    found: dict[str, Any] = {"compiles": [], "ran_eager": [], "limited": [], "wrong": []}
    for name in ("ttft_ms", "tpot_ms", "eager_ttft_ms", "eager_tpot_ms"):
        found[name] = []
    began = time.perf_counter()
    with metrics.others_cpu() as load:
        _serve_requests(w, (served, model), prompts, expected, decoding, found)
    if "share" in load:  # how much of the CPU other processes took meanwhile
        found["others_cpu"] = load["share"]
    found["served_s"] = time.perf_counter() - began
    found["graphs"] = metrics.compile_counts()[0]
    found["through"] = "autotune.apply_generation"
    return Measurement(*request.base(), "ok", traffic=found, timings=ctx.timings)


def continuous(request: Request, passes: int = 3) -> Measurement:
    """A continuous traffic's plain loop: the manager a user builds from the exported file
    (``init_continuous_batching`` with :func:`autotune.continuous_batching_config`), warmed up
    and started, the traffic served at its arrivals once (the graphs Dynamo compiled after the
    warm-up, by its own counter; each request's tokens), then ``passes`` times more (the median
    pass's TTFT and time per token). Nothing else runs in its process: no eager side."""
    import statistics

    import autotune
    from autotune.trial.scenarios import replay

    assert request.exported is not None
    ctx = begin(request)
    ctx.phase("building the model")
    w = ctx.workload
    model, _ = catalog.build(ctx.ref, w)
    prompts = replay.prompts(model, w, request.seed)
    config = autotune.continuous_batching_config(request.exported)
    if usercode.is_code(ctx.strategy.backend):  # named on the user's own command line
        function = usercode.resolve(ctx.strategy.backend, "backend")
        for path in (config.varlen_compile_config, config.decode_compile_config):
            if path is not None:
                path.backend = function
    ctx.phase("serving the traffic in a plain loop")
    made, ready = replay.manager(model, config, list(w.answers))
    try:
        before = metrics.compile_counts()[0]
        first = replay.serve(made, prompts, list(w.answers), list(w.arrivals), w.concurrency)
        graphs = metrics.compile_counts()[0] - before
        with metrics.others_cpu() as load:
            later = [replay.serve(made, prompts, list(w.answers), list(w.arrivals),
                                  w.concurrency, tag=f"{k}-") for k in range(passes)]  # fmt: skip
    finally:
        made.stop(block=True)
    found: dict[str, Any] = {"through": "autotune.continuous_batching_config",
                             "ready_s": ready, "graphs": graphs,
                             "tokens": [r.tokens for r in first.requests]}  # fmt: skip
    for name in ("ttft_p50_ms", "tpot_p50_ms"):
        found[name] = statistics.median(p.summary()[name] for p in later)
    if "share" in load:
        found["others_cpu"] = load["share"]
    return Measurement(*request.base(), "ok", traffic={"continuous": found}, timings=ctx.timings)


def _serve_requests(
    w: Any,
    sides: tuple[Any, Any],
    prompts: dict[Any, Any],
    expected: dict[Any, Any],
    decoding: Any,
    found: dict[str, Any],
) -> None:
    """Each request of ``w``'s traffic through the served model's ``generate``, in arrival
    order, and eager's of the same request after it: ``found`` gets each one's graphs
    compiled, whether it ran eager, its times and eager's, and tokens that differ (greedy)."""
    import statistics

    import torch

    from autotune.trial.scenarios import served as timed
    from autotune.trial.scenarios.generate import check_tokens

    served, model = sides
    sampled = decoding.samples(model)  # drawn tokens are not judged: the trial judged greedy
    for n, (shape, answer) in enumerate(zip(w.traffic, w.answers, strict=True), 1):
        before = metrics.compile_counts()
        with torch.no_grad():
            run = timed.run(served, prompts[shape], answer, w.device, decoding=decoding)
        after = metrics.compile_counts()
        eager = timed.run(model, prompts[shape], answer, w.device, decoding=decoding)
        for prefix, side in (("", run), ("eager_", eager)):
            found[f"{prefix}ttft_ms"].append(side.prefill_s * 1e3)
            found[f"{prefix}tpot_ms"].append(statistics.mean(side.steps_s or [0.0]) * 1e3)
        found["compiles"].append(after[0] - before[0])
        if after[1] > before[1]:
            found["ran_eager"].append(n)
            found["limited"].append(n)
        tokens, margins = expected[shape]
        check = check_tokens(tokens[:, :answer], run.tokens, "", margins[:answer])
        if not check.passed and not sampled:
            found["wrong"].append([n, check.detail])


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
