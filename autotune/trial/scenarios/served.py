"""A traffic's trial (``--traffic``, ``--seq-len 16..512``): the inference workload over the
requests a deployment serves, in the trial's fresh cold process.

1. **First pass**: eager plays the requests in order, then the compiled model does, as a server
   meets them: each request's latency with its compile and recompile stalls, the graphs each
   compiled and why, the requests that ran eager past the recompile limit, and **time to
   ready** (until every distinct shape has run once). The start objective is what compiling
   adds to eager's own first pass (``compile_s``).
2. **Steady state**: shapes that stand for the traffic (:func:`autotune.traffic.steady`), one
   call of each per round, interleaved with eager; a round's sample is the latency weighted by how
   often the traffic holds each shape, so the sign test runs over the whole traffic.
3. **Accuracy**: a few shapes (:func:`autotune.traffic.judged`), each against eager and the
   study's reference at that shape, on a fixed-stride sample of each output (:data:`SAMPLE`
   elements); the worst verdict stands, and says how many were judged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from autotune import catalog, device
from autotune import traffic as traffics
from autotune.trial import accuracy, metrics, recompiles
from autotune.trial.measurement import Accuracy, Latency
from autotune.trial.scenarios import steps
from autotune.trial.scenarios.inference import Inference

Shape = tuple[int, int]
SAMPLE = 2**16  # elements of each output judged at a traffic's shape (a fixed stride): the
# reference keeps them in float64 for several shapes, with the study (gemma's logits at 256
# tokens are 65 M elements)


def judged_outputs(out: Any) -> list[Any]:
    """What is judged of one traffic shape's outputs: a fixed-stride sample of each tensor."""
    return [accuracy.sample(t, SAMPLE) for t in accuracy.tensors(out)]


def reference_name(shape: Shape) -> str:
    """The reference's outputs of one traffic shape."""
    return f"forward@{shape[0]}x{shape[1]}"


def weighted_call(
    step: dict[Shape, Callable[[], Any]],
    weights: dict[Shape, float],
    where: str,
    seen: dict[Shape, list[float]] | None = None,
) -> Callable[[], float]:
    """One call of every steady shape; the seconds weighted by the traffic (each shape's own
    seconds kept in ``seen``). The confirmation times a traffic with the same call."""

    def call() -> float:
        total = 0.0
        for shape, weight in weights.items():
            seconds = device.timed(step[shape], where)
            total += weight * seconds
            if seen is not None:
                seen.setdefault(shape, []).append(seconds)
        return total

    return call


def ran_eager(before: tuple, after: tuple, new: bool, blocks_eager: set[int] | None) -> bool:
    """Whether a request ran eager: it hit the recompile limit, or it was a shape that could
    (``new``) and its repeated blocks ran as Python (without blocks to watch: the limit had
    been hit and nothing compiled). ``before``/``after``: :func:`metrics.compile_counts`."""
    if after[1] > before[1]:
        return True
    if not new:
        return False
    return bool(blocks_eager) if blocks_eager is not None else before[1] > 0 and after == before


class Served(Inference):
    """``--workload inference`` over a traffic (see the module's docstring)."""

    def setup(self) -> None:
        super().setup()
        ctx = self.ctx
        w = ctx.workload
        inputs = {s: catalog.inputs_at(ctx.ref, self.model, w, s) for s in w.shapes}
        self.steps = {side: {s: steps.make_step(model, i, "inference") for s, i in inputs.items()}
                      for side, model in (("eager", self.eager_model),
                                          ("compiled", self.compiled))}  # fmt: skip
        self.weights = traffics.steady(w.traffic)
        self.seen: dict[str, dict[Shape, list[float]]] = {"eager": {}, "compiled": {}}

    def play(self, side: str) -> dict[str, Any]:
        """The first pass of one side: each request's milliseconds, and for the compiled side
        the graphs it compiled, its recompile reasons and whether it ran eager (past the
        recompile limit, or as the stance ``eager_on_recompile`` says)."""
        ctx, requests = self.ctx, self.ctx.workload.traffic
        blocks = recompiles.blocks_of(self.model)
        found: dict[str, Any] = {"ms": [], "compiles": [], "reasons": [], "eager": []}
        seen: set[Shape] = set()
        ready = 0.0
        start = time.perf_counter()
        for n, shape in enumerate(requests, 1):
            before = metrics.compile_counts() if side == "compiled" else (0, 0, [])
            # past a recompile limit, or under eager_on_recompile, a new shape may run eager
            limited = side == "compiled" and shape not in seen and (before[1] > 0 or (
                ctx.strategy.stance == "eager_on_recompile" and n > 1))  # fmt: skip
            if limited and blocks:
                with recompiles.eager_blocks(blocks) as eager:
                    seconds, _ = device.wall(self.steps[side][shape], ctx.device)
            else:
                seconds, _ = device.wall(self.steps[side][shape], ctx.device)
                eager = set()
            found["ms"].append(seconds * 1e3)
            if shape not in seen:
                seen.add(shape)
                ready = time.perf_counter() - start
            if side == "compiled":
                after = metrics.compile_counts()
                found["compiles"].append(after[0] - before[0])
                found["reasons"] += [[n, r] for r in after[2][len(before[2]) :]]
                if ran_eager(before, after, limited, eager if blocks else None):
                    found["eager"].append(n)
        found["ready_s"] = ready
        return found

    def first(self) -> None:
        ctx, m = self.ctx, self.ctx.result
        eager = self.play("eager")
        ctx.memory.reset()
        compiled = self.play("compiled") if ctx.strategy.granularity != "none" else eager
        stalls = [c - e for c, e in zip(compiled["ms"], eager["ms"], strict=True)]
        m.eager_first_s = eager["ms"][0] / 1e3
        m.compile_s = (0.0 if ctx.strategy.granularity == "none"
                       else max(0.0, compiled["ready_s"] - eager["ready_s"]))  # fmt: skip
        requests = ctx.workload.traffic
        m.traffic = {
            "requests": len(requests), "shapes": len(set(requests)),
            "ready_s": compiled["ready_s"], "eager_ready_s": eager["ready_s"],
            "first_ms": compiled["ms"], "eager_first_ms": eager["ms"],
            "compiles": compiled.get("compiles") or [0] * len(requests),
            "stalls": sum(1 for c in compiled.get("compiles") or [] if c),
            "worst_stall_ms": max(stalls), "reasons": compiled.get("reasons", []),
            "ran_eager": compiled.get("eager", []),
        }  # fmt: skip
        m.accuracy = self.judge_shapes()

    def judge_shapes(self) -> Accuracy:
        """The worst verdict over the judged shapes, saying how many were judged."""
        ctx = self.ctx
        shapes = traffics.judged(ctx.workload.traffic)
        verdicts = []
        for shape in shapes:
            expected = self.steps["eager"][shape]()
            actual = self.steps["compiled"][shape]()
            verdict = ctx.judge(judged_outputs(expected), judged_outputs(actual),
                                reference_name(shape))  # fmt: skip
            verdicts.append((not verdict.passed, verdict.max_rel, shape, verdict))
        failed, _, shape, worst = max(verdicts, key=lambda v: (v[0], v[1]))
        worst.detail = (f"{'at' if failed else 'worst at'} batch {shape[0]} x seq {shape[1]} "
                        f"({len(shapes)} of {len(set(ctx.workload.traffic))} shapes judged)"
                        + (f": {worst.detail}" if worst.detail else ""))  # fmt: skip
        return worst

    def calls(self) -> dict[str, Callable[[], Any]]:
        where = self.ctx.device
        return {side: weighted_call(self.steps[side], self.weights, where, self.seen[side])
                for side in ("eager", "compiled")}  # fmt: skip

    def timer(self, call: Callable[[], Any]) -> Any:
        return call()  # it times each shape itself

    def record(self, samples: dict[str, list[Any]]) -> None:
        super().record(samples)
        assert self.ctx.result.traffic is not None
        rounds = len(samples["compiled"])
        self.ctx.result.traffic["steady"] = [
            {"batch_size": shape[0], "seq_len": shape[1], "weight": weight,
             "eager_ms": Latency.from_samples(self.seen["eager"][shape][-rounds:]).median_ms,
             "compiled_ms": Latency.from_samples(self.seen["compiled"][shape][-rounds:]).median_ms}
            for shape, weight in self.weights.items()
        ]  # fmt: skip

    def build(self, kind: str, path: str) -> dict[str, Any]:
        return {"error": f"a traffic's trial builds no {kind} artefact (one shape's would miss "
                "the others)"}  # fmt: skip
