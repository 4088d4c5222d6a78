"""The generate workload: whole generations through ``model.generate``, as a user's loop calls
it (:mod:`.served`), each token timed as it arrives.

A generation of N new tokens is ``model.generate(max_new_tokens=N)``, greedy: one prefill of
``batch x seq_len`` tokens gives the first token, then N - 1 decode steps give the rest. Three
sides, interleaved in every round:

- **eager**, as a plain user runs it: the model's own ``generate`` with the cache it makes
  itself (transformers' default). Every speedup, TTFT and tokens/s is against this side;
- **compiled**: the strategy's generator (:func:`autotune.strategy.granularity.generator`,
  which :func:`autotune.apply_generation` serves) on a ``transformers.StaticCache`` of
  ``seq_len + N`` positions, allocated before any compiled call sees it (its tensors keep
  fixed addresses, marked static, as CUDA graphs need) and reset in place between generations;
- **static**: eager on such a cache, so that what a static cache alone buys is shown beside
  the strategy's speedup (``eager_static``), never credited to it.

Per trial: cold compile until the first decode step has run; TTFT and per-token time over the
interleaved rounds; tokens/s; every round's tokens against eager's; the first two tokens'
logits against eager's under the dtype's tolerance; recompiles, and a recompile limit hit in
words. :class:`Generation` also steps a forward by hand (:meth:`Generation.prefill`,
:meth:`Generation.decode`: the recompile probe's and the reference's calls, and a forward that
has no ``generate`` of its own).
"""

from __future__ import annotations

import functools
import inspect
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune import catalog, device
from autotune.errors import ConfigError
from autotune.strategy import granularity
from autotune.strategy.kv_cache import cache_keyword, cache_mb
from autotune.trial import accuracy, metrics
from autotune.trial.accuracy import SMALL
from autotune.trial.measurement import Latency, TokenCheck
from autotune.trial.scenarios import served
from autotune.trial.scenarios.base import Scenario
from autotune.trial.scenarios.served import GREEDY, Decoding, Run, margin
from autotune.workload import Workload

if TYPE_CHECKING:
    import torch


def new_cache(model: torch.nn.Module, workload: Workload, like: Any = None,
              length: int | None = None) -> Any:  # fmt: skip
    """A static KV cache of ``length`` positions (default ``workload.cache_len``) for
    ``workload``'s batch; allocated now if ``like`` (a cache that has run) gives the layers'
    shapes, else on its first update, or, handed to a compiled forward of
    :func:`autotune.strategy.granularity.generator`, just before its first call."""
    from transformers import StaticCache

    try:
        cache = StaticCache(config=model.config, max_cache_len=length or workload.cache_len)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ConfigError(f"no static KV cache for {type(model).__name__}: {exc}") from exc
    if like is not None:
        heads = _per_layer([layer.num_heads for layer in like.layers])
        dims = _per_layer([layer.k_head_dim for layer in like.layers])
        cache.early_initialization(
            workload.batch_size, heads, dims, workload.torch_dtype, workload.device
        )
    return cache


def _per_layer(values: list[int]) -> int | list[int]:
    """One number when every layer has it (``early_initialization`` takes that in every 5.x),
    else the per-layer list (which it takes in later 5.x: 5.12 does, 5.0 does not)."""
    return values[0] if len(set(values)) == 1 else values


class Generation:
    """A generation of ``new_tokens`` from ``prompt``: through ``forward.generate`` where the
    forward is a model that generates (:func:`.served.generates`), on ``cache`` (None: the one
    ``generate`` makes), as ``decoding`` says; else greedy, a step at a time, the forward
    called by hand."""

    def __init__(self, forward: Callable[..., Any], cache: Any, prompt: torch.Tensor,
                 new_tokens: int, device: str, decoding: Decoding = GREEDY) -> None:  # fmt: skip
        import torch

        self.forward, self.cache, self.prompt, self.decoding = forward, cache, prompt, decoding
        self.new_tokens, self.device = new_tokens, device
        seq = prompt.shape[1]
        self.prefill_positions = torch.arange(seq, device=device)
        self.position = torch.tensor([seq], device=device)  # one tensor, updated in place
        model_forward = getattr(forward, "forward", forward)
        params = inspect.signature(model_forward).parameters
        self.extra = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self.cache_keyword = cache_keyword(model_forward)
        self.generates = served.generates(forward)  # through generate, decided once
        if decoding != GREEDY and not self.generates:
            raise ConfigError("--stop and --sampling are timed through a model's own generate: "
                              f"{type(forward).__name__} has none")  # fmt: skip
        self.token: Any = None
        self.logits: Any = None

    def _call(self, ids: torch.Tensor, positions: torch.Tensor) -> None:
        import torch

        with torch.no_grad():
            out = self.forward(input_ids=ids, cache_position=positions, use_cache=True,
                               **{self.cache_keyword: self.cache}, **self.extra)  # fmt: skip
        logits = out.logits if hasattr(out, "logits") else accuracy.tensors(out)[0]
        self.logits = logits[:, -1]
        self.token = self.logits.argmax(-1, keepdim=True)

    def prefill(self, reset: bool = True) -> None:
        """Reset the cache in place (unless the caller did) and run the prompt: the first
        token (by hand)."""
        if reset:
            self.cache.reset()
        self.position.fill_(self.prompt.shape[1])
        self._call(self.prompt, self.prefill_positions)

    def decode(self) -> None:
        """One decode step: the last token in, the next one out."""
        self._call(self.token, self.position)
        self.position.add_(1)

    def run(self, first: bool = False, margins: bool = False) -> Run:
        """A whole generation, every forward timed: ``first`` (the compiles) each on its own
        wall clock after a synchronize; else one event pair per forward and one synchronize
        at the end, as gpt-fast does, so the CPU's launches overlap the device's work. With
        ``margins``, the gap between the top two logits behind each token (where a near tie
        could flip it). Through ``generate`` where the forward generates (:mod:`.served`)."""
        import torch

        if self.generates:
            return served.run(self.forward, self.prompt, self.new_tokens, self.device,
                              self.cache, self.cache_keyword, logits=first or margins,
                              decoding=self.decoding)  # fmt: skip

        timer = device.StepTimer(self.device)

        def timed(fn: Callable[[], Any]) -> None:
            if first:
                timer.seconds.append(device.wall(fn, self.device)[0])
            else:
                timer.time(fn)

        # the reset zeroes the whole cache, before the clock: a longer cache (eager's, against a
        # bucket's) would pay more for it and bias the TTFT toward the shorter
        self.cache.reset()
        timed(functools.partial(self.prefill, reset=False))
        tokens = [self.token]
        result = Run(None, 0.0, prefill_logits=self.logits.float().clone())
        if margins:
            result.margins.append(margin(self.logits))
        for step in range(self.new_tokens - 1):
            timed(self.decode)
            if step == 0:
                result.first_logits = self.logits.float().clone()
            if margins:
                result.margins.append(margin(self.logits))
            tokens.append(self.token)
        result.tokens = torch.cat(tokens, dim=1)
        seconds = timer.elapsed()
        result.prefill_s, result.steps_s = seconds[0], seconds[1:]
        return result


def check_tokens(expected: torch.Tensor, actual: torch.Tensor, where: str = "",
                 margins: list[float] | None = None, tie: float = 0.0) -> TokenCheck:  # fmt: skip
    """All greedy tokens equal; else the first that differs is a wrong answer unless eager's
    top two logits there were within ``tie`` (the reference error) of each other: a near tie,
    which either side could break. After a first difference the sequences are incomparable,
    so the check stops there and says so. An answer that ended sooner (at its end-of-sequence
    token) differs where the other goes on."""
    n = min(expected.shape[1], actual.shape[1])
    same = (expected[:, :n] == actual[:, :n]).all(dim=0).tolist()
    if expected.shape[1] != actual.shape[1]:
        same.append(False)  # where one stopped and the other did not
    if all(same):
        return TokenCheck(True, len(same), len(same))
    j = same.index(False)
    margin = margins[j] if margins and j < len(margins) else None
    if margin is not None and margin <= tie:
        return TokenCheck(True, len(same), j, (
            f"tokens agree up to token {j + 1} of {len(same)}{where}, where eager's top two "
            f"logits were {margin:.3g} apart, within the reference error {tie:.3g}: a near "
            "tie; not compared after it"), near_tie=True)  # fmt: skip
    why = "" if margin is None else (
        f" (eager's margin {margin:.3g} > the reference error {tie:.3g})")  # fmt: skip
    if j == n:
        why = f" (eager's answer is {expected.shape[1]} tokens, this one {actual.shape[1]})"
    return TokenCheck(False, len(same), j, f"token {j + 1} of {len(same)} differs from "
                      f"eager{where}{why}")  # fmt: skip


class Generate(Scenario):
    """``--workload generate``: whole generations, eager and compiled, on the same prompt."""

    def setup(self) -> None:
        ctx = self.ctx
        self.model, inputs = catalog.build(ctx.ref, ctx.workload)
        self.prompt = inputs[0]
        self.compiled = granularity.generator(self.model, ctx.strategy)
        forward = getattr(self.compiled.forward, "compiled", self.compiled)
        ctx.result.regions = granularity.count_regions(forward)
        self.decoding = served.Decoding.of(ctx.workload, ctx.seed, self.model)

    def first(self) -> None:
        ctx, m, w = self.ctx, self.ctx.result, self.ctx.workload
        where, n = ctx.device, w.new_tokens
        w = w.at((self.prompt.shape[0], self.prompt.shape[1]))  # a function model's own inputs
        d = self.decoding
        self.eager = Generation(self.model, None, self.prompt, n, where, d)  # the default cache
        self.expected = self.eager.run(first=True, margins=True)
        if not self.expected.steps_s:
            raise ConfigError("--stop eos: the model's answer ends at its first token, so no "
                              "decode step is left to time; use --stop length")  # fmt: skip
        m.eager_first_s = self.expected.prefill_s + self.expected.steps_s[0]
        self.static = Generation(self.model, new_cache(self.model, w), self.prompt, n, where, d)
        self.static.run()
        cache = new_cache(self.model, w, like=self.static.cache)  # fixed addresses first
        self.gen = Generation(self.compiled, cache, self.prompt, n, where, d)
        ctx.memory.reset()
        was = self.recorded()
        run = self.gen.run(first=True)  # cold: prefill's graphs, decode's recompile and graphs
        cold = run.prefill_s + (run.steps_s or [0.0])[0]
        m.compile_s = 0.0 if ctx.strategy.granularity == "none" else cold
        # CUDA graphs record on a graph's second call (Inductor's log counts them): compiling
        # too. The decode step's records at the second step, the prefill's in a second
        # generation; a prefill left eager records nothing, and its time is no recording
        if self.recorded() > was and len(run.steps_s) > 1:
            recording, middle = run.steps_s[1], self.recorded()
            again = self.gen.run(first=True)
            recording += again.prefill_s if self.recorded() > middle else 0.0
            m.compile_s += recording
            ctx.timings["cuda_graph_recording_s"] = recording
        m.accuracy = self.judge_logits(run)
        self.tokens = self.check(run, "")

    def held_caches(self) -> dict[str, list[Any]]:
        """Each side's KV caches, kept for the rounds (eager's: none, ``generate`` makes its
        own at each call)."""
        return {"eager": [], "compiled": [self.gen.cache], "static": [self.static.cache]}

    def others_mb(self, side: str) -> float:
        """The other sides' KV caches, alive in this process while ``side``'s peak is read:
        eager is not charged the compiled side's caches, nor a cache a bucket eager static's
        full-length one."""
        return sum(cache_mb(c) for other, held in self.held_caches().items() if other != side
                   for c in held)  # fmt: skip

    def judge_logits(self, run: Run) -> Any:
        """The prefill's logits against the reference's; the first decode step's too when its
        input token is the same on every side (else they answer different questions)."""
        e, ref = self.expected, self.ctx.reference
        first = e.tokens[:, :1]
        same = bool((run.tokens[:, :1] == first).all())
        if ref is not None:
            same = same and bool((ref["outputs"]["token"][0].to(first.device) == first).all())
        if not same:
            return self.ctx.judge([e.prefill_logits], [run.prefill_logits], "prefill")
        eager, compiled = (
            [e.prefill_logits, e.first_logits],
            [run.prefill_logits, run.first_logits],
        )
        return self.ctx.judge(eager, compiled, "prefill", "decode")

    def tie(self, verdict: Any = None) -> float:
        """How far apart eager's top two logits may be and still be a near tie: eager's own
        largest logit error against the reference in ``verdict`` (default: the trial's; times
        the gate's multiplier); 0 without a reference (every token must match)."""
        a = verdict if verdict is not None else self.ctx.result.accuracy
        if a is None or not a.reference or a.eager_max is None:
            return 0.0
        return self.ctx.gate.multiplier(2 * SMALL) * a.eager_max

    def check(self, run: Run, where: str) -> TokenCheck:
        return check_tokens(self.expected.tokens, run.tokens, where, self.expected.margins,
                            self.tie())  # fmt: skip

    def calls(self) -> dict[str, Callable[[], Any]]:
        return {"eager": lambda: self.eager.run(), "compiled": lambda: self.gen.run(),
                "static": lambda: self.static.run()}  # fmt: skip

    def timer(self, call: Callable[[], Any]) -> Any:
        return call()  # a generation times each of its own forwards

    def seconds(self, sample: Any) -> float:
        return statistics.median(sample.steps_s)  # the round's per-token decode

    def after_round(self, samples: dict[str, list[Any]]) -> bool:
        sampled = self.decoding.samples(self.model)  # drawn tokens: judged greedy, first
        if self.tokens.passed and not self.tokens.near_tie and not sampled:
            done = len(samples["compiled"])
            self.tokens = self.check(samples["compiled"][-1], f" in timed round {done}")
        return super().after_round(samples)

    def record(self, samples: dict[str, list[Any]]) -> None:
        m = self.ctx.result
        assert m.accuracy is not None
        if not self.tokens.passed:  # a strategy that changes the tokens is infeasible
            m.accuracy.passed = False
            m.accuracy.detail = "; ".join(filter(None, (self.tokens.detail, m.accuracy.detail)))
        elif self.tokens.near_tie:  # passed, and says where it stopped comparing
            m.accuracy.detail = "; ".join(filter(None, (m.accuracy.detail, self.tokens.detail)))
        m.tokens = self.tokens

        def stats(runs: list[Run]) -> tuple[Latency, Latency, float]:
            decode = Latency.from_samples([s for run in runs for s in run.steps_s] or [0.0])
            prefill = Latency.from_samples([run.prefill_s for run in runs])
            return decode, prefill, served.tokens_per_s(runs, self.ctx.workload.batch_size)

        m.eager_latency, m.eager_ttft, m.eager_tokens_per_s = stats(samples["eager"])
        m.latency, m.ttft, m.tokens_per_s = stats(samples["compiled"])
        m.speedup = m.eager_latency.median_ms / m.latency.median_ms
        first = statistics.median(self.expected.steps_s or [self.expected.prefill_s])
        if ratio := metrics.contended(first, m.eager_latency.samples_ms):
            self.ctx.timings["contended"] = ratio
        static = stats(samples["static"])
        m.eager_static = {"tpot_ms": static[0].median_ms, "ttft_ms": static[1].median_ms,
                          "tokens_per_s": static[2]}  # fmt: skip

    def probes(self) -> dict[str, Callable[[], Any]]:
        return {"prefill": self.gen.prefill, "decode": self.gen.decode}
