"""The inference and train workloads: one call is a no-grad forward, or a forward, backward
and optimizer step; compiled and eager calls run on the same inputs."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from autotune import catalog, compile, device, metrics, timing
from autotune.measurement import Latency
from autotune.scenarios.base import Scenario


def _loss(output: Any) -> Any:
    first = metrics.tensors(output)[0]
    return first.float().pow(2).mean()


def make_step(model: Any, inputs: tuple, kind: str, mark_steps: bool = False) -> Callable[[], Any]:
    """One call of the workload: a no-grad forward, or forward + backward + optimizer step.

    With ``mark_steps`` (CUDA graphs), each call first tells torch that a new step begins, so
    that the graphs of one call never read outputs that the next call overwrites (regional
    compilation chains one graph per block)."""
    import torch

    mark = torch.compiler.cudagraph_mark_step_begin if mark_steps else (lambda: None)
    if kind == "inference":

        def forward() -> Any:
            mark()
            with torch.no_grad():
                return model(*inputs)

        return forward
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def train_step() -> Any:
        mark()
        optimizer.zero_grad(set_to_none=True)
        loss = _loss(model(*inputs))
        loss.backward()
        optimizer.step()
        return loss.detach()

    return train_step


def _grads(model: Any) -> list[Any]:
    return [p.grad for p in model.parameters() if p.grad is not None]


class Inference(Scenario):
    """``--workload inference``: eager and compiled share the model (a forward changes nothing)."""

    def eager_twin(self, model: Any) -> Any:
        """The model the eager side calls."""
        return model

    def compared(self, expected: Any, actual: Any) -> tuple[list[Any], list[Any]]:
        """What the accuracy verdict compares of the first eager and compiled calls."""
        return metrics.tensors(expected), metrics.tensors(actual)

    def setup(self) -> None:
        ctx = self.ctx
        model, self.inputs = catalog.build(ctx.ref, ctx.workload)
        self.model = model
        self.eager_model = self.eager_twin(model)
        self.compiled = compile.apply(model, ctx.strategy)
        ctx.result.regions = compile.count_regions(self.compiled)
        self.graphs = ctx.strategy.uses_cuda_graphs()
        marks = device.marks_steps(ctx.device, self.graphs)
        kind = ctx.workload.kind
        self.eager_step = make_step(self.eager_model, self.inputs, kind)
        self.compiled_step = make_step(self.compiled, self.inputs, kind, mark_steps=marks)

    def first(self) -> None:
        ctx, m = self.ctx, self.ctx.result
        m.eager_first_s, expected = timing.wall(self.eager_step, ctx.device)
        ctx.memory.reset()
        first_s, actual = timing.wall(self.compiled_step, ctx.device)
        if self.graphs:  # CUDA graphs are recorded on the second call: that is compiling too
            recording_s, actual = timing.wall(self.compiled_step, ctx.device)
            first_s += recording_s
            ctx.timings["cuda_graph_recording_s"] = recording_s
        m.compile_s = 0.0 if ctx.strategy.granularity == "none" else first_s
        m.accuracy = metrics.compare(*self.compared(expected, actual), ctx.workload.dtype)

    def calls(self) -> dict[str, Callable[[], Any]]:
        return {"eager": self.eager_step, "compiled": self.compiled_step}

    def record(self, samples: dict[str, list[Any]]) -> None:
        m = self.ctx.result
        m.eager_latency = Latency.from_samples(samples["eager"])
        m.latency = Latency.from_samples(samples["compiled"])
        m.speedup = m.eager_latency.median_ms / m.latency.median_ms


class Train(Inference):
    """``--workload train``: forward, backward and an SGD step, eager on a copy of the model;
    accuracy covers the loss and every gradient."""

    def eager_twin(self, model: Any) -> Any:
        return copy.deepcopy(model)

    def compared(self, expected: Any, actual: Any) -> tuple[list[Any], list[Any]]:
        e, a = super().compared(expected, actual)  # the step's loss, then every gradient
        return e + _grads(self.eager_model), a + _grads(self.model)
