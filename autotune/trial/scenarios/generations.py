"""The generate workload over a traffic (``--workload generate`` with ``--traffic FILE`` or spreads
of ``--seq-len`` and ``--new-tokens``): each request a whole greedy generation, as a server runs
them, in the trial's fresh cold process.

1. **The KV cache as a deployment sizes it**: one static cache a batch size, of the traffic's
   longest prompt plus answer (:attr:`autotune.workload.Workload.cache_len`), or, as the
   strategy's ``kv_cache`` says, one a bucket of prompt-plus-answer lengths
   (:mod:`autotune.strategy.kv_cache`), each allocated before any compiled call sees it and
   reset in place between generations; so the decode graph is one per cache, and a new prompt
   length is a prefill's compile or recompile (none where the prefill is eager). Eager's side
   runs ``generate`` with the cache it makes itself, as a plain user does: what the strategy is
   compared with is eager as served. In the steady rounds eager on the single static cache runs
   beside them (``eager_static``): what a static cache alone buys. Every generation is one
   ``generate`` call (:mod:`.served`).
2. **First pass**, in arrival order: each distinct (batch, prompt length, cache length)'s first
   arrival is generated in full with its own answer length, eager then compiled. Its **stall**
   is the compiled generation's time over eager's where it compiled a graph (Dynamo's
   counter); where the compile hit the recompile limit, its prefill ran eager. Its greedy
   tokens are checked against eager's and its prefill's and first decode step's logits judged
   against eager's.
   One short generation more of each side (:data:`REPEAT_STEPS` decode steps: against a static
   cache each step costs the same) gives the pair's repeat latencies, at which its later
   arrivals count: the cost grows with distinct pairs, not with requests or tokens. Per
   request: TTFT, time per output token (TPOT), the stall, whether it ran eager. **Time to
   ready** is eager's (each request up to the last new pair's first arrival, at eager's
   latencies) plus the stalls.
3. **Steady state**: the shapes that stand for the traffic (:func:`autotune.traffic.steady`),
   one short generation of each per round on each side, interleaved; a round's sample is the
   per-token decode latency weighted by the traffic's output tokens (the ``decode`` objective),
   with TTFT weighted by its requests beside it (``ttft``).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import Any

from autotune import catalog, traffic
from autotune.strategy import granularity, kv_cache
from autotune.trial import cudagraph_logs, dispatch, metrics
from autotune.trial.measurement import Latency, TokenCheck
from autotune.trial.scenarios import served
from autotune.trial.scenarios.base import Scenario
from autotune.trial.scenarios.generate import Generate, Generation, check_tokens, new_cache
from autotune.trial.scenarios.served import Run

Key = tuple[int, int, int]  # a request's batch, prompt length and (compiled side's) cache length
REPEAT_STEPS = 4  # decode steps of a repeat's and a steady round's generation
SIDES = ("eager", "compiled", "static")  # the steady rounds' (see the module's text)


def _total(run: Run) -> float:
    return run.total_s


class Generations(Generate):
    """``--workload generate`` over a traffic (see the module's docstring)."""

    def setup(self) -> None:
        ctx, w = self.ctx, self.ctx.workload
        self.model, _ = catalog.build(ctx.ref, w)
        self.compiled = granularity.generator(self.model, ctx.strategy, traffic=w.traffic)
        forward = getattr(self.compiled.forward, "compiled", self.compiled)
        ctx.result.regions = granularity.count_regions(forward)
        self.prompts = {s: catalog.inputs_at(ctx.ref, self.model, w, s)[0] for s in w.shapes}
        totals = kv_cache.footprints(ctx.strategy, w.traffic, w.answers)
        lengths = kv_cache.lengths(ctx.strategy.kv_cache, totals)
        pairs = zip(w.traffic, lengths, strict=True)
        self.keys: tuple[Key, ...] = tuple((b, s, n) for (b, s), n in pairs)
        self.caches: dict[str, dict[tuple[int, int], Any]] = {"static": {}, "compiled": {}}
        self.weights: dict[Key, float] = {}
        self.tokens_weights: dict[Key, float] = {}
        self.steady: dict[str, dict[Key, Generation]] = {s: {} for s in SIDES}
        self.decoding = served.Decoding.of(w, ctx.seed, self.model)
        self.lengths: list[int] = list(w.answers)  # where each answer ended (eos: measured)

    def cache(self, side: str, batch: int, length: int) -> Any:
        """The side's static cache for ``batch`` and ``length`` (eager's: none, ``generate``
        makes its own; eager static's: the single one), the compiled side's allocated like a
        static one that has run where there is one (else just before its first compiled
        call), so that its tensors have fixed addresses before a compiled call."""
        if side == "eager":
            return None
        w, found = self.ctx.workload, self.caches[side]
        size = (batch, length if side == "compiled" else w.cache_len)
        if size not in found:
            like = (
                next(
                    (
                        c
                        for (b, _), c in self.caches["static"].items()
                        if b == batch and c.is_initialized
                    ),
                    None,
                )
                if side == "compiled"
                else None
            )
            found[size] = new_cache(self.model, w.at((batch, w.seq_len)), like, size[1])
        return found[size]

    def held_caches(self) -> dict[str, list[Any]]:
        return {"eager": [], **{side: list(found.values()) for side, found in self.caches.items()}}

    def generation(self, side: str, key: Key, new_tokens: int, whole: bool = False
                   ) -> Generation:  # fmt: skip
        """A side's generation at ``key``: a request's ``whole`` answer as the decoding ends
        it, else ``new_tokens`` decode steps' worth (a repeat's, a steady round's: a sample
        of the steps, every one decoded, sampled where the decoding samples)."""
        forward = self.compiled if side == "compiled" else self.model
        decoding = self.decoding if whole else dataclasses.replace(self.decoding, stop="length")
        return Generation(forward, self.cache(side, key[0], key[2]), self.prompts[key[:2]],
                          new_tokens, self.ctx.device, decoding)  # fmt: skip

    def first(self) -> None:
        with cudagraph_logs.cudagraph_recordings() as recordings, metrics.others_cpu() as load:
            self.play(recordings)
        if "share" in load:  # other processes' share of the CPU while it played the requests
            self.ctx.timings["first_others_cpu"] = load["share"]

    def play(self, recordings: Callable[[], int]) -> None:
        """The first pass (see the module's text), CUDA graphs' ``recordings`` read as it goes:
        a prompt length's prefill graph records at its second call, the repeat's, whose time
        over eager's repeat is a stall too; the repeat a later arrival stands at is a call that
        neither compiled nor recorded (:func:`.dispatch.settled`). A later arrival after graphs
        compiled at other keys is played again where it may run another graph now
        (:func:`.dispatch.revisit`: a dynamic prefill takes over a static one's length)."""
        ctx, m, w = self.ctx, self.ctx.result, self.ctx.workload
        per: dict[str, list[Any]] = {k: [] for k in (
            "ttft_ms", "tpot_ms", "eager_ttft_ms", "eager_tpot_ms", "stall_ms", "compiles",
            "first_ms", "eager_first_ms", "recorded")}  # fmt: skip
        ran_eager, reasons, played, verdicts, moved = [], [], [], [], []
        repeats: dict[Key, tuple[Run, Run]] = {}
        marks: dict[Key, int] = {}  # where Dynamo's records stood when a key was last played
        ended: dict[Key, tuple[int, int]] = {}  # a played answer's (most, tokens) by its shape
        self.tokens = TokenCheck(True, 0, 0)
        self.eager_shapes: set[Key] = set()
        for n, (shape, answer) in enumerate(zip(self.keys, w.answers, strict=True), 1):
            before, was = metrics.compile_counts(), recordings()
            if shape in repeats:
                stall, short = 0.0, repeats[shape][0]
                ran = shape in self.eager_shapes
                if fresh := dispatch.compiled_since(marks[shape]):
                    with self.compiled_part():
                        again, stall = dispatch.revisit(self.repeat(shape), _total, short.total_s,
                                                        fresh, recordings)  # fmt: skip
                    if again is not None:
                        moved.append(n)
                        repeats[shape] = (short, again)
                runs = repeats[shape]
            else:
                played.append(n)
                e = self.generation("eager", shape, answer, True).run(first=True, margins=True)
                short = self.generation("eager", shape, REPEAT_STEPS + 1).run()
                ended[shape] = (answer, e.tokens.shape[1])
                with self.compiled_part():
                    c = self.generation("compiled", shape, answer, True).run(first=True)
                    middle = metrics.compile_counts()
                    compiled = middle[0] > before[0] or recordings() > was
                    stall = max(0.0, c.total_s - e.total_s) if compiled else 0.0
                    # the prefill's graph records at its second call: a repeat that does
                    # neither stands for the later arrivals
                    again, more = dispatch.settled(self.repeat(shape), _total, short.total_s,
                                                   recordings)  # fmt: skip
                stall += more
                ran = middle[1] > before[1]
                if ran:
                    self.eager_shapes.add(shape)
                self.check_pair(n, shape, e, c, verdicts)
                repeats[shape], runs = (short, again), (e, c)
            after = metrics.compile_counts()
            graphs, recorded = after[0] - before[0], recordings() - was
            reasons += [(n, r) for r in after[2][len(before[2]) :]]
            marks[shape] = dispatch.mark()
            if ran:
                ran_eager.append(n)
            most, got = ended[shape]  # greedy: a prompt's answer ends where it ended before
            self.lengths[n - 1] = min(answer, got) if got < most else answer
            for side, run in zip(("eager_", ""), runs, strict=True):
                tpot = statistics.mean(run.steps_s) if run.steps_s else 0.0
                per[f"{side}ttft_ms"].append(run.prefill_s * 1e3)
                per[f"{side}tpot_ms"].append(tpot * 1e3)
                per[f"{side}first_ms"].append(
                    (run.prefill_s + tpot * (self.lengths[n - 1] - 1)) * 1e3
                )
            per["stall_ms"].append(stall * 1e3)
            per["compiles"].append(graphs)
            per["recorded"].append(recorded)
        last_new = played[-1]
        eager_ready = sum(per["eager_first_ms"][:last_new]) / 1e3
        m.eager_first_s = per["eager_first_ms"][0] / 1e3
        m.compile_s = sum(per["stall_ms"]) / 1e3 if ctx.strategy.granularity != "none" else 0.0
        stalls = sum(1 for c, r in zip(per["compiles"], per["recorded"], strict=True) if c or r)
        m.traffic = {
            "requests": len(w.traffic), "shapes": len(set(w.traffic)), "played": played,
            "answers": list(w.answers), "ended": list(self.lengths), "cache_len": w.cache_len,
            "cache_lens": sorted({k[2] for k in self.keys}), **per,
            "ready_s": eager_ready + m.compile_s, "eager_ready_s": eager_ready,
            "stalls": stalls, "moved": moved,
            "worst_stall_ms": max(per["stall_ms"]), "reasons": reasons, "ran_eager": ran_eager,
        }  # fmt: skip
        m.accuracy = self.worst(verdicts)
        self.weights = traffic.steady(self.keys, self.eager_shapes,  # type: ignore[arg-type]
                                      ctx.request.steady or traffic.STEADY_SHAPES)  # fmt: skip
        self.tokens_weights = self.by_tokens(self.weights)
        self.gen = self.generation("compiled", next(iter(self.weights)), REPEAT_STEPS + 1)
        for side in self.steady:
            for shape in self.weights:
                self.steady[side][shape] = self.generation(side, shape, REPEAT_STEPS + 1)

    def repeat(self, key: Key) -> Callable[[], tuple[Run, int]]:
        """The compiled side's repeat at ``key`` (a short generation), as
        :mod:`..dispatch` calls it: the run, and the graphs it compiled."""

        def call() -> tuple[Run, int]:
            before = metrics.compile_counts()[0]
            run = self.generation("compiled", key, REPEAT_STEPS + 1).run()
            return run, metrics.compile_counts()[0] - before

        return call

    def check_pair(self, n: int, key: Key, e: Run, c: Run, verdicts: list[Any]) -> None:
        """Request ``n``'s first generations at ``key``: their logits judged, their tokens
        checked under the gate's tolerance, as a steady trial's."""
        verdicts.append((key, self.judge_pair(e, c, key)))
        if not self.tokens.passed:
            return
        found = check_tokens(e.tokens, c.tokens, f" in request {n}", e.margins,
                             self.tie(verdicts[-1][1]))  # fmt: skip
        was = self.tokens
        self.tokens = found if not found.passed else TokenCheck(
            True, was.tokens + found.tokens, was.matched + found.matched,
            was.detail or found.detail, was.near_tie or found.near_tie)  # fmt: skip

    def judge_pair(self, e: Run, c: Run, key: Key) -> Any:
        """One pair's prefill and first decode logits against eager's (the prefill's alone
        where the first tokens differ: the decode steps then answer different questions)."""
        where = f"{key[0]}x{key[1]}"
        if not bool((c.tokens[:, :1] == e.tokens[:, :1]).all()) or c.first_logits is None:
            return self.ctx.judge([e.prefill_logits], [c.prefill_logits], f"prefill {where}")
        return self.ctx.judge([e.prefill_logits, e.first_logits],
                              [c.prefill_logits, c.first_logits], f"prefill {where}",
                              f"decode {where}")  # fmt: skip

    def worst(self, verdicts: list[tuple[Key, Any]]) -> Any:
        """The worst verdict over the pairs the first pass played, saying where and how many."""
        failed, _, shape, worst = max(((not v.passed, v.max_rel, s, v) for s, v in verdicts),
                                      key=lambda t: (t[0], t[1]))  # fmt: skip
        worst.detail = (f"{'at' if failed else 'worst at'} batch {shape[0]} x prompt "
                        f"{shape[1]} (cache {shape[2]}); {len(verdicts)} prompt shapes judged"
                        + (f": {worst.detail}" if worst.detail else ""))  # fmt: skip
        return worst

    def by_tokens(self, weights: dict[Key, float]) -> dict[Key, float]:
        """The steady shapes' weights by the output tokens of their requests."""
        mean = {s: statistics.mean(n for r, n in zip(self.keys, self.lengths, strict=True)
                                   if r == s) for s in weights}  # fmt: skip
        total = sum(weights[s] * mean[s] for s in weights)
        return {s: weights[s] * mean[s] / total for s in weights}

    def calls(self) -> dict[str, Callable[[], Any]]:
        def side(name: str) -> Callable[[], Any]:
            return lambda: {s: g.run() for s, g in self.steady[name].items()}

        return {name: side(name) for name in SIDES}

    def seconds(self, sample: Any) -> float:
        """A round's per-token decode latency, weighted by the traffic's output tokens."""
        return sum(self.tokens_weights[s] * statistics.median(r.steps_s)
                   for s, r in sample.items())  # fmt: skip

    def ttft_s(self, sample: Any) -> float:
        return sum(self.weights[s] * r.prefill_s for s, r in sample.items())

    def after_round(self, samples: dict[str, list[Any]]) -> bool:
        if self.ctx.request.kind == "confirm":
            return self.confirm_ends(samples)
        return Scenario.after_round(self, samples)

    def record(self, samples: dict[str, list[Any]]) -> None:
        m = self.ctx.result
        assert m.accuracy is not None and m.traffic is not None
        if not self.tokens.passed or self.tokens.near_tie:  # wrong tokens: infeasible
            m.accuracy.passed = m.accuracy.passed and self.tokens.passed
            m.accuracy.detail = "; ".join(filter(None, (self.tokens.detail, m.accuracy.detail)))
        m.tokens = self.tokens
        batch = sum(self.weights[s] * s[0] for s in self.weights)
        for prefix, side in (("eager_", "eager"), ("", "compiled"), ("static_", "static")):
            decode = Latency.from_samples([self.seconds(s) for s in samples[side]])
            ttft = Latency.from_samples([self.ttft_s(s) for s in samples[side]])
            if side == "static":  # beside the figures, never in them
                m.eager_static = {"tpot_ms": decode.median_ms, "ttft_ms": ttft.median_ms,
                                  "tokens_per_s": batch * 1e3 / decode.median_ms}  # fmt: skip
                continue
            setattr(m, f"{prefix}latency", decode)
            setattr(m, f"{prefix}ttft", ttft)
            setattr(m, f"{prefix}tokens_per_s", batch * 1e3 / decode.median_ms)
        m.speedup = m.eager_latency.median_ms / m.latency.median_ms
        played = [m.traffic["eager_tpot_ms"][n - 1] for n in m.traffic["played"]]
        if ratio := metrics.contended(statistics.median(played) / 1e3, m.eager_latency.samples_ms):
            self.ctx.timings["contended"] = ratio
        rounds = {side: samples[side] for side in ("eager", "compiled")}
        m.traffic["weighted"] = {
            "tpot_ms": m.latency.median_ms, "eager_tpot_ms": m.eager_latency.median_ms,
            "ttft_ms": m.ttft.median_ms, "eager_ttft_ms": m.eager_ttft.median_ms,
        }  # fmt: skip
        m.traffic["steady"] = [
            {"batch_size": s[0], "seq_len": s[1], "cache_len": s[2], "weight": weight,
             "eager_ms": statistics.median(statistics.median(r[s].steps_s)
                                           for r in rounds["eager"]) * 1e3,
             "compiled_ms": statistics.median(statistics.median(r[s].steps_s)
                                              for r in rounds["compiled"]) * 1e3,
             "ttft_ms": statistics.median(r[s].prefill_s for r in rounds["compiled"]) * 1e3,
             "eager_ttft_ms": statistics.median(r[s].prefill_s for r in rounds["eager"]) * 1e3,
             "ran_eager": s in self.eager_shapes}
            for s, weight in self.weights.items()
        ]  # fmt: skip

        if self.ctx.request.kind == "confirm":  # the rounds, as a confirmation reads them
            self.ctx.result.rounds = {
                "none": [self.seconds(x) * 1e3 for x in samples["eager"]],
                self.ctx.strategy.key: [self.seconds(x) * 1e3 for x in samples["compiled"]],
            }  # fmt: skip

    def build(self, kind: str, path: str) -> dict[str, Any]:
        return {"error": f"a generate traffic's trial builds no {kind} artefact"}
