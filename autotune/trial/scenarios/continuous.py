"""The continuous workload (``--workload continuous``): many requests at once, served by
transformers' continuous batching over an arrival traffic, each pass through the user's own
calls (:mod:`.replay`), in the trial's fresh cold process.

1. **Two managers**, as a user builds them: eager's (nothing compiled, the same
   ``max_batch_tokens`` and ``max_requests_per_batch``) and the strategy's
   (``ContinuousBatchingConfig`` from :func:`autotune.strategy.batching.config_kwargs`), each
   with a KV cache sized for the traffic (:func:`autotune.strategy.batching.blocks`). The
   strategy's warm-up is timed: **time to ready**.
2. **First pass**: the traffic served once by each, at its arrival times. Every graph Dynamo
   compiles after the warm-up is a **stall** (its seconds, from Dynamo's own compile
   callbacks), paid by the requests in flight; past a recompile limit, the batches that ran
   eager, and their requests, are found by watching the manager's thread
   (:mod:`.eager_batches`). The compiled side's tokens must equal eager's, request by
   request, all of them.
   ``compile_s`` is time to ready plus the stalls. Eager's batches on its first pass (each
   one's query tokens and the cache it read, untimed: that pass's own figures count) price the
   strategy's padding on the varlen path
   (:func:`autotune.strategy.batching.padding`); a ``pad=auto`` pilot's are timed on a second
   pass, past eager's first calls, for its step model (:mod:`autotune.trial.auto_padding`).
3. **Steady passes**, eager's and the strategy's interleaved: a round is one pass of each;
   its sample is the mean time a request spends in the server (``latency``), with p90 TTFT
   (``ttft``), TPOT and tokens a second beside it.
"""

from __future__ import annotations

import time
from typing import Any

from autotune import arrivals, catalog, usercode
from autotune.errors import NotApplicable
from autotune.strategy import batching, intervals
from autotune.trial import metrics
from autotune.trial.measurement import Accuracy, Latency
from autotune.trial.scenarios import eager_batches, replay
from autotune.trial.scenarios.base import Scenario
from autotune.trial.scenarios.replay import Pass

RULE = "tokens exact against eager's, every request of the traffic"
PATHS = ("varlen_compile_config", "decode_compile_config")


class Continuous(Scenario):
    """``--workload continuous`` (see the module's docstring)."""

    def setup(self) -> None:
        ctx, w = self.ctx, self.ctx.workload
        self.model, _ = catalog.build(ctx.ref, w)
        if not hasattr(self.model, "init_continuous_batching"):
            raise NotApplicable(f"{ctx.ref} has no init_continuous_batching: continuous "
                                "batching serves transformers' causal LMs")  # fmt: skip
        self.prompts = replay.prompts(self.model, w, ctx.seed)
        self.answers = list(w.answers)
        self.arrivals = list(w.arrivals)
        s = ctx.strategy
        blocks = batching.blocks([len(p) for p in self.prompts], self.answers, s.batching)
        compiled = batching.compile_config(s) if s.granularity != "none" else None
        self.kwargs = {**batching.config_kwargs(s.batching, compiled, s.edges),
                       "num_blocks": blocks}  # fmt: skip
        self.served = self.kwargs  # as run: an import-path backend, the function it names
        if compiled is not None and usercode.is_code(s.backend):
            function = s.compile_kwargs()["backend"]
            self.served = {**self.kwargs, **{k: {**self.kwargs[k], "backend": function}
                                             for k in PATHS if k in self.kwargs}}  # fmt: skip
        self.eager_kwargs = {**batching.eager_kwargs(s.batching), "num_blocks": blocks}
        self.stalls: list[float] = []
        self.graphs = 0  # graphs the first pass compiled after the warm-up (Dynamo's counter)
        self.began = 0.0
        self.passes = 0
        self.eager_batches = 0  # batches of the first pass past the recompile limit, eager
        self.ran_eager: list[int] = []  # ...the requests in them (1-based)
        self.limit_elsewhere: list[str] = []  # functions past the limit, no forward of it

    def serve(self, made: Any) -> Pass:
        """One pass of the traffic through a started manager."""
        self.passes += 1
        w = self.ctx.workload
        return replay.serve(made, self.prompts, self.answers, self.arrivals,
                            concurrency=w.concurrency, tag=f"p{self.passes}-")  # fmt: skip

    def first(self) -> None:
        ctx, m = self.ctx, self.ctx.result
        t = time.perf_counter()
        self.eager, _ = replay.manager(self.model, self.eager_kwargs, self.answers)
        # eager's batches as it forms them, for the padding: shapes only, not synchronised
        with replay.batches(self.model, ctx.workload.device, timed=False) as self.steps:
            expected = self.serve(self.eager)
        m.eager_first_s = time.perf_counter() - t
        if ctx.strategy.granularity == "none":
            self.compiled, ready, got = self.eager, 0.0, expected
        else:
            if ctx.request.kind == "pilot":  # pad=auto's: timed past eager's first calls
                with replay.batches(self.model, ctx.workload.device) as self.steps:
                    self.serve(self.eager)
            watch = eager_batches.Watch(self.model)
            self.compiled, ready = replay.manager(self.model, self.served, self.answers, watch)
            before = metrics.compile_counts()[0]
            with watch.serving(), metrics.around_compiles(self._began, self._ended):
                got = self.serve(self.compiled)
            self.graphs = metrics.compile_counts()[0] - before
            hits = metrics.limit_hits()
            self.eager_batches, ids = watch.served_eager(hits)
            self.limit_elsewhere = watch.unwatched(hits)
            self.ran_eager = [n for n in range(1, len(self.prompts) + 1)
                              if f"p{self.passes}-r{n - 1}" in ids]  # fmt: skip
        m.compile_s = ready + sum(self.stalls)
        ctx.timings["ready_s"] = ready
        self.first_passes = {"eager": expected, "compiled": got}
        m.accuracy = _tokens_verdict(expected, got)
        m.tokens = None

    def _began(self) -> None:
        self.began = time.perf_counter()

    def _ended(self) -> None:
        self.stalls.append(time.perf_counter() - self.began)

    def calls(self) -> dict[str, Any]:
        return {"eager": lambda: self.serve(self.eager),
                "compiled": lambda: self.serve(self.compiled)}  # fmt: skip

    def timer(self, call: Any) -> Any:
        with metrics.around_compiles(self._began, self._ended):  # a stall later still counts
            return call()

    def seconds(self, sample: Any) -> float:
        return sample.mean_ms / 1e3

    def after_round(self, samples: dict[str, list[Any]]) -> bool:
        if self.ctx.request.kind == "confirm":
            return self.confirm_ends(samples)
        return Scenario.after_round(self, samples)

    def record(self, samples: dict[str, list[Any]]) -> None:
        m, w = self.ctx.result, self.ctx.workload
        slo = arrivals.slo(w.slo)

        def stats(passes: list[Pass]) -> tuple[Latency, Latency, float]:
            latency = Latency.from_samples([self.seconds(p) for p in passes])
            ttft = Latency.from_samples([p.quantile("ttft_ms", 0.9) / 1e3 for p in passes])
            rates = sorted(p.tokens_per_s for p in passes)
            return latency, ttft, rates[len(rates) // 2]

        m.eager_latency, m.eager_ttft, m.eager_tokens_per_s = stats(samples["eager"])
        m.latency, m.ttft, m.tokens_per_s = stats(samples["compiled"])
        m.speedup = m.eager_latency.median_ms / m.latency.median_ms
        first, last = self.first_passes, {k: self._median(v) for k, v in samples.items()}
        m.compile_s = self.ctx.timings["ready_s"] + sum(self.stalls)
        m.traffic = {"continuous": {
            "ready_s": self.ctx.timings["ready_s"],
            "stalls_s": list(self.stalls),
            "graphs": self.graphs,
            "eager_batches": self.eager_batches,  # ran eager past the recompile limit
            "ran_eager": self.ran_eager,  # ...the requests in them (1-based)
            "limit_elsewhere": self.limit_elsewhere,
            "first_tokens": [r.tokens for r in first["compiled"].requests],
            "first": {side: p.summary(slo) for side, p in first.items()},
            "steady": {side: p.summary(slo) for side, p in last.items()},  # the median pass
            "requests": {side: p.to_dict()["requests"] for side, p in last.items()},
            "config": self.kwargs,
            "padding": ({} if self.ctx.strategy.granularity == "none" else batching.padding(
                self.steps, self.ctx.strategy.batching, self.kwargs["num_blocks"],
                self.ctx.strategy.edges)),
            # eager's; a pilot's timed on a second pass (else 0 s): what pad=auto prices
            "batches": intervals.histogram(self.steps),
        }}  # fmt: skip
        if self.ctx.request.kind == "confirm":  # the rounds, as a confirmation reads them
            m.rounds = {"none": [self.seconds(x) * 1e3 for x in samples["eager"]],
                        self.ctx.strategy.key: [self.seconds(x) * 1e3
                                                for x in samples["compiled"]]}  # fmt: skip

    def _median(self, passes: list[Pass]) -> Pass:
        """The pass whose time in the server is the median of a side's (the lower middle)."""
        return sorted(passes, key=self.seconds)[(len(passes) - 1) // 2]

    def run(self) -> Any:
        try:
            return super().run()
        finally:  # its managers' loops are threads that would keep the process alive
            self.close()

    def probes(self) -> dict[str, Any]:
        return {}  # the manager's thread runs the blocks: its first pass was watched instead

    def close(self) -> None:
        managers = (getattr(self, "eager", None), getattr(self, "compiled", None))
        for made in {id(x): x for x in managers if x is not None}.values():
            made.stop(block=True, timeout=30)


def _tokens_verdict(expected: Pass, got: Pass) -> Accuracy:
    """The compiled side's tokens against eager's: every request's, exactly."""
    for i, (e, g) in enumerate(zip(expected.requests, got.requests, strict=True)):
        if e.tokens != g.tokens:
            pairs = enumerate(zip(e.tokens, g.tokens, strict=False))
            j = next((k for k, (a, b) in pairs if a != b), min(len(e.tokens), len(g.tokens)))
            detail = (f"request {i + 1}: token {j + 1} of {len(e.tokens)} differs from "
                      "eager's")  # fmt: skip
            return Accuracy(0.0, 0.0, False, 0.0, 0.0, detail=detail, rule=RULE)
    return Accuracy(0.0, 0.0, True, 0.0, 0.0, rule=RULE)
