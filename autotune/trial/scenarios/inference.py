"""The inference and train workloads: one call is a no-grad forward, or a forward, backward
and optimizer step; compiled and eager calls run on the same inputs."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from autotune import catalog, device
from autotune.starts import precompiled
from autotune.strategy import granularity
from autotune.trial import accuracy
from autotune.trial.measurement import Latency
from autotune.trial.scenarios import steps
from autotune.trial.scenarios.base import Scenario


class Inference(Scenario):
    """``--workload inference``: eager and compiled share the model (a forward changes nothing)."""

    def eager_twin(self, model: Any) -> Any:
        """The model the eager side calls."""
        return model

    def compared(self, expected: Any, actual: Any) -> tuple[list[Any], list[Any]]:
        """What the accuracy verdict compares of the eager and compiled calls."""
        return accuracy.tensors(expected), accuracy.tensors(actual)

    def reference_name(self, calls: int) -> str:
        """The reference's outputs that the compared calls correspond to."""
        return "forward"

    def setup(self) -> None:
        ctx = self.ctx
        model, self.inputs = catalog.build(ctx.ref, ctx.workload)
        self.model = model
        self.eager_model = self.eager_twin(model)
        if load := ctx.request.load_ahead:  # a start that skips the compiler: (kind, path)
            t = time.perf_counter()
            if ctx.workload.device == "cpu":
                ctx.timings["isa_probes_s"] = precompiled.isa_probes_s()
            self.compiled = precompiled.load(*load, model)
            ctx.result.load_s = time.perf_counter() - t
        else:
            self.compiled = granularity.apply(model, ctx.strategy, traffic=ctx.workload.traffic)
            ctx.result.regions = granularity.count_regions(self.compiled)
        self.graphs = ctx.strategy.uses_cuda_graphs()
        kind = ctx.workload.kind
        self.eager_step = steps.make_step(self.eager_model, self.inputs, kind)
        self.compiled_step = steps.make_step(self.compiled, self.inputs, kind)

    def first(self) -> None:
        ctx, m = self.ctx, self.ctx.result
        m.eager_first_s, expected = device.wall(self.eager_step, ctx.device)
        ctx.memory.reset()
        first_s, actual = device.wall(self.compiled_step, ctx.device)
        calls = 1
        if self.graphs:  # CUDA graphs are recorded on the second call: that is compiling too
            recording_s, actual = device.wall(self.compiled_step, ctx.device)
            first_s += recording_s
            ctx.timings["cuda_graph_recording_s"] = recording_s
            calls = 2
            expected = self.eager_step()  # the same call on both sides (a train step's second)
        m.compile_s = 0.0 if ctx.strategy.granularity == "none" else first_s
        m.accuracy = ctx.judge(*self.compared(expected, actual), self.reference_name(calls))
        if ctx.request.load_ahead:
            ctx.timings["frames_compiled"] = float(precompiled.frames_compiled())

    def build(self, kind: str, path: str) -> dict[str, Any]:
        return precompiled.build(kind, self.model, self.inputs, self.ctx.strategy, path)

    def calls(self) -> dict[str, Callable[[], Any]]:
        return {"eager": self.eager_step, "compiled": self.compiled_step}

    def record(self, samples: dict[str, list[Any]]) -> None:
        m = self.ctx.result
        m.eager_latency = Latency.from_samples(samples["eager"])
        m.latency = Latency.from_samples(samples["compiled"])
        m.speedup = m.eager_latency.median_ms / m.latency.median_ms


class Train(Inference):
    """``--workload train``: forward, backward and an SGD step, eager on a copy of the model;
    accuracy covers the same step's loss and a fixed-stride sample of every gradient (all of
    each gradient up to :data:`autotune.trial.accuracy.SAMPLE` elements)."""

    def eager_twin(self, model: Any) -> Any:
        return copy.deepcopy(model)

    def compared(self, expected: Any, actual: Any) -> tuple[list[Any], list[Any]]:
        e, a = super().compared(expected, actual)  # the step's loss, then every gradient
        eager = [accuracy.sample(g) for g in steps.grads(self.eager_model)]
        return e + eager, a + [accuracy.sample(g) for g in steps.grads(self.model)]

    def reference_name(self, calls: int) -> str:
        return f"step{calls}"
