"""A traffic's trial (``--traffic``, ``--seq-len 16..512``): the inference workload over the
requests a deployment serves, in the trial's fresh cold process, called as users call it (with
an ``attention_mask`` where the forward takes one).

0. **Warm-up**: one untimed eager call at a shape the traffic does not hold, so that neither
   side's first request pays the process's one-time costs (allocator growth, library init).
1. **First pass**: each distinct shape's first arrival, in arrival order, as a server meets it:
   eager's call of that shape, then the compiled model's (its compile or recompile is the
   request's **stall**: what it cost over eager's call of the same shape), then one untimed
   call that finds whether the compiled model ran that shape eager (past a recompile limit,
   or by its stance). A repeat changes nothing a first pass measures, so repeats are not
   played (the cost grows with distinct shapes, not requests), except under
   ``eager_then_compile``, which compiles a frame on its second call, so that any extra call
   would move its compiles: it is played as a server plays it, one compiled call a request
   and no probe (a recompile-limit failure in Dynamo's counts says it ran eager), until its
   first compile and a call of every shape after it (each call watched for a unit that ran
   its forward as Python: a frame's first call runs eager); then as any other. A shape that
   arrives again is called once more on each side, for the repeat latency its later arrivals
   stand at; one that arrives once is not. A CUDA-graph
   strategy records a shape's graph on its second call: that call is a stall too. **Time to
   ready** is eager's time to ready (each request up to the last new shape's first arrival,
   at eager's latency of its shape) plus the stalls; the start objective is the stalls' sum
   (``compile_s``). A pre-warmed deployment's (:func:`prewarmed`) compiles every bucket
   first, those the traffic did not hit too.
2. **Steady state**: shapes that stand for the traffic and keep its mix of shapes served
   compiled and eager (:func:`autotune.traffic.steady`), one call of each per round,
   interleaved with eager; a round's sample is the latency weighted by the traffic. A cheap
   rung (:mod:`autotune.trial.rungs`) times fewer of them first, in rounds of its own.
3. **Accuracy**: every shape whose first arrival compiled a graph, then the extremes, each
   against eager and the study's reference at that shape (:func:`judged_outputs`); shapes
   that ran eager are not judged. The worst verdict stands, and says "K compiled graphs
   judged of N".
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from autotune import catalog, traffic
from autotune.strategy import shapes
from autotune.trial import cudagraph_logs, recompiles, rungs, timing
from autotune.trial.measurement import Accuracy, Latency
from autotune.trial.scenarios import steps
from autotune.trial.scenarios.first_pass import FirstPass
from autotune.trial.scenarios.inference import Inference
from autotune.trial.scenarios.judged import judged_outputs, reference_name
from autotune.trial.scenarios.steady import fitting_shapes, weighted_call

Shape = tuple[int, int]


def stalls_of(compiles: list[int], recorded: list[int]) -> int:
    """How many requests stalled: each that compiled a graph or recorded a CUDA graph (a
    dynamic graph records one per new length without compiling again; a shape served eager
    records none)."""
    return sum(1 for c, r in zip(compiles, recorded, strict=True) if c or r)


def prewarmed(buckets: str, requests: tuple[Shape, ...], stalls_s: float,
              chosen: Any = None) -> dict[str, Any]:  # fmt: skip
    """Time to ready of a deployment that compiles before its first request every bucket its
    traffic's range makes (``buckets``: of all, ``[hit, all]``), or every shape it will meet:
    the stalls' sum, the buckets the traffic did not hit priced at the mean stall of those it
    did (``prewarmed_s``)."""
    every, hit = shapes.count(buckets, requests, chosen), shapes.hit(buckets, requests, chosen)
    if not every or not hit:
        return {"prewarmed_s": stalls_s}
    return {"prewarmed_s": stalls_s * every / hit, "buckets": [hit, every]}


def throwaway(requests: tuple[Shape, ...]) -> Shape:
    """A shape the traffic does not hold, no larger than its largest: the warm-up's."""
    held = set(requests)
    batch = min(b for b, _ in requests)
    return next(((batch, s) for s in range(1, max(s for _, s in requests) + 1)
                 if (batch, s) not in held), (batch, 1))  # fmt: skip


class TrafficTrial(Inference):
    """``--workload inference`` over a traffic (see the module's docstring)."""

    def setup(self) -> None:
        super().setup()
        ctx = self.ctx
        w = ctx.workload
        self.steps: dict[str, dict[Shape, Callable[[], Any]]] = {"eager": {}, "compiled": {}}
        for shape in [*w.shapes, throwaway(w.traffic)]:
            inputs = catalog.inputs_at(ctx.ref, self.model, w, shape)
            given = steps.keywords_for(self.model, inputs)
            for side, model in (("eager", self.eager_model), ("compiled", self.compiled)):
                self.steps[side][shape] = steps.make_step(model, inputs, "inference", given)
        self.units = recompiles.units_of(self.model, ctx.strategy.granularity)
        self.seen: dict[str, dict[Shape, list[float]]] = {"eager": {}, "compiled": {}}
        self.compiled_shapes: list[Shape] = []  # whose first arrival compiled a graph
        self.graphs_at: collections.Counter[Shape] = collections.Counter()  # compiled there
        self.eager_shapes: set[Shape] = set()  # served eager by the compiled model
        self.weights: dict[Shape, float] = {}

    def ran_eager(self, shape: Shape) -> bool:
        """One untimed call of ``shape``: did a compiled unit run its own forward as Python?"""
        if not self.units:
            return False
        with recompiles.eager_blocks(self.units) as seen:
            self.steps["compiled"][shape]()
        return bool(seen)

    def play(self) -> dict[str, Any]:
        """The first pass (see the module's docstring): per request, eager's and the compiled
        model's milliseconds (a request not played at its shape's repeat latency), the graphs
        each compiled and why, the CUDA graphs it recorded, its stall, and the requests served
        eager."""
        with cudagraph_logs.cudagraph_recordings() as recordings:
            return FirstPass(self, recordings).run()

    def first(self) -> None:
        ctx, m = self.ctx, self.ctx.result
        requests = ctx.workload.traffic
        self.steps["eager"][throwaway(requests)]()  # the process's one-time costs, untimed
        ctx.memory.reset()
        found = self.play()
        last_new = max({s: i for i, s in reversed(list(enumerate(requests)))}.values())
        eager_ready = sum(found["eager_ms"][: last_new + 1]) / 1e3
        stalls = sum(found["stall_ms"]) / 1e3
        m.eager_first_s = found["eager_ms"][0] / 1e3
        m.compile_s = stalls if ctx.strategy.granularity != "none" else 0.0
        m.traffic = {
            "requests": len(requests), "shapes": len(set(requests)),
            "played": found["played"],
            "ready_s": eager_ready + m.compile_s, "eager_ready_s": eager_ready,
            "first_ms": found["compiled_ms"], "eager_first_ms": found["eager_ms"],
            "stall_ms": found["stall_ms"], "compiles": found["compiles"],
            "recorded": found["recorded"], "moved": found["moved"],
            "stalls": stalls_of(found["compiles"], found["recorded"]),
            "worst_stall_ms": max(found["stall_ms"]), "reasons": found["reasons"],
            "ran_eager": found["ran_eager"],
            **prewarmed(ctx.strategy.buckets, requests, m.compile_s, ctx.strategy.edges),
            **({"sampled": found["sampled"]} if "sampled" in found else {}),
        }  # fmt: skip
        most = ctx.request.steady or fitting_shapes(ctx.request, found["eager_ms"])
        self.weights = traffic.steady(requests, self.eager_shapes, most)
        if ctx.request.kind != "confirm":  # its trial judged the strategy
            m.accuracy = self.judge_shapes()

    def judge_shapes(self) -> Accuracy:
        """The worst verdict over the shapes that ran compiled code: every one whose first
        arrival compiled a graph, then the extremes; says how many of the graphs compiled at
        those shapes were judged, and over how many shapes (a shape without a reference is
        not judged, and its graphs count against K, unless none is covered: then the compiled
        shapes are judged against eager alone)."""
        ctx = self.ctx
        if ctx.strategy.granularity == "none":
            return self._judge([traffic.distinct(ctx.workload.traffic)[0][0]], "eager")
        covered = set(ctx.reference["outputs"]) if ctx.reference else None
        extremes = [s for s in traffic.extremes(ctx.workload.traffic)
                    if s not in self.eager_shapes]  # fmt: skip
        shapes = [s for s in dict.fromkeys([*self.compiled_shapes, *extremes])
                  if s not in self.eager_shapes]  # fmt: skip
        if covered is not None:
            shapes = [s for s in shapes if reference_name(s) in covered]
        compiled = [s for s in self.compiled_shapes if s not in self.eager_shapes]
        if not shapes:  # none the reference covers: every graph still judged, against eager
            shapes = compiled
        total = sum(self.graphs_at[s] for s in compiled)
        judged = sum(self.graphs_at[s] for s in compiled if s in shapes)
        words = f"{judged} of {total} graphs judged"
        if not shapes:
            return Accuracy(0.0, 0.0, True, 0.0, 0.0, f"nothing compiled ran: {words}",
                            rule=ctx.gate.describe(ctx.request.reference_dtype))  # fmt: skip
        return self._judge(shapes, words)

    def _judge(self, shapes: list[Shape], words: str) -> Accuracy:
        ctx, verdicts = self.ctx, []
        for shape in shapes:
            expected = self.steps["eager"][shape]()
            actual = self.steps["compiled"][shape]()
            verdict = ctx.judge(judged_outputs(expected), judged_outputs(actual),
                                reference_name(shape))  # fmt: skip
            verdicts.append((not verdict.passed, verdict.max_rel, shape, verdict))
        failed, _, shape, worst = max(verdicts, key=lambda v: (v[0], v[1]))
        worst.detail = (f"{'at' if failed else 'worst at'} batch {shape[0]} x seq {shape[1]}; "
                        f"{words} ({len(shapes)} shapes)"
                        + (f": {worst.detail}" if worst.detail else ""))  # fmt: skip
        return worst

    def calls(self) -> dict[str, Callable[[], Any]]:
        where = self.ctx.device
        return {side: weighted_call(self.steps[side], self.weights, where, self.seen[side])
                for side in ("eager", "compiled")}  # fmt: skip

    def timer(self, call: Callable[[], Any]) -> Any:
        return call()  # it times each shape itself

    def time_rounds(self, calls: dict[str, Callable[[], Any]]) -> dict[str, list[Any]]:
        """A cheap rung over a sample of the steady shapes first, where the steady state
        times more; a strategy that cannot reach the front stops there, its steady state the
        sample's. Else (or with fewer shapes) the rounds as every workload times them."""
        ctx, rung = self.ctx, self.rung
        sample = traffic.steady(ctx.workload.traffic, self.eager_shapes, rungs.SHAPES)
        if rung is None or len(sample) >= len(self.weights):
            return super().time_rounds(calls)
        where = ctx.device
        cheap = {side: weighted_call(self.steps[side], sample, where, self.seen[side])
                 for side in ("eager", "compiled")}  # fmt: skip
        first = timing.interleave(cheap, rung.rounds, self.timer, ctx.seed)
        if self.cannot_reach(first):
            self.weights = sample
            return first
        return super().time_rounds(calls)

    def after_round(self, samples: dict[str, list[Any]]) -> bool:
        if self.ctx.request.kind == "confirm":  # all its rounds, unless none could show it
            return timing.none_can_show(samples, self.ctx.request.iters, "eager")
        return super().after_round(samples)

    def record(self, samples: dict[str, list[Any]]) -> None:
        super().record(samples)
        assert self.ctx.result.traffic is not None
        rounds = len(samples["compiled"])
        self.ctx.result.traffic["steady"] = [
            {"batch_size": shape[0], "seq_len": shape[1], "weight": weight,
             "eager_ms": Latency.from_samples(self.seen["eager"][shape][-rounds:]).median_ms,
             "compiled_ms": Latency.from_samples(self.seen["compiled"][shape][-rounds:]).median_ms,
             "ran_eager": shape in self.eager_shapes}
            for shape, weight in self.weights.items()
        ]  # fmt: skip
        if self.ctx.request.kind == "confirm":  # the rounds, as a confirmation reads them
            key = self.ctx.strategy.key
            self.ctx.result.rounds = {"none": [s * 1e3 for s in samples["eager"]],
                                      key: [s * 1e3 for s in samples["compiled"]]}  # fmt: skip

    def build(self, kind: str, path: str) -> dict[str, Any]:
        return {"error": f"a traffic's trial builds no {kind} artefact (one shape's would miss "
                "the others)"}  # fmt: skip
