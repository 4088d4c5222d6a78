"""Generation: a prefill, then greedy decode steps against a static KV cache, each step timed.

A generation of N new tokens is what ``model.generate(max_new_tokens=N)`` runs greedily: one
prefill forward of ``batch x seq_len`` tokens gives the first token, then N - 1 decode steps,
each one forward of ``batch x 1`` with its ``cache_position``, give the rest. The cache is a
``transformers.StaticCache`` of ``seq_len + N`` positions, allocated once: the compiled
generation's cache is allocated before any compiled call sees it, so its tensors keep fixed
addresses (marked static, as CUDA graphs need), and reset in place between generations. The
forward called is the model's ``__call__``, as ``generate`` calls it, compiled at the trial's
granularity by :func:`generator`, which :func:`autotune.apply_generation` uses too.

Per trial (run by :mod:`autotune.child` for ``--workload generate``): cold compile until the first
decode step has run; TTFT (prefill) and per-token decode latency over interleaved rounds with
eager; tokens/s; every round's tokens against eager's; the first decode step's logits against
eager's under the dtype's tolerance; recompiles, and a recompile limit hit in words.
"""

from __future__ import annotations

import functools
import inspect
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune import metrics, recompiles
from autotune.errors import ConfigError
from autotune.measurement import Latency, Measurement, Memory, TokenCheck
from autotune.strategy import Strategy
from autotune.timing import synchronize, timed, wall
from autotune.workload import Workload

if TYPE_CHECKING:
    import torch


def generator(model: torch.nn.Module, strategy: Strategy) -> torch.nn.Module:
    """A model of the same class, sharing parameters, whose forward runs ``strategy``.

    ``generate`` on it runs the compiled forward: a full or nested compile is wrapped in a
    shallow copy whose ``forward`` calls it (``generate`` on a ``torch.compile`` wrapper would run
    the uncompiled model); a regional compile is already a copy of the model's class.
    """
    from torch._dynamo.eval_frame import OptimizedModule

    from autotune import compile

    compiled = compile.apply(model, strategy)
    if not isinstance(compiled, OptimizedModule):
        return compiled  # eager (the model itself), or regional (a new tree)
    gen = compile._shallow_copy(model)

    @functools.wraps(model.forward)  # generate reads the forward's signature
    def forward(*args: Any, **kwargs: Any) -> Any:
        return compiled(*args, **kwargs)

    forward.compiled = compiled  # type: ignore[attr-defined]  # for count_regions
    gen.forward = forward
    return gen


def uses_cudagraphs(strategy: Strategy, workload: Workload) -> bool:
    """Whether each step must begin with ``torch.compiler.cudagraph_mark_step_begin()``."""
    return workload.is_cuda and strategy.needs_cuda() is not None


def new_cache(model: torch.nn.Module, workload: Workload, like: Any = None) -> Any:
    """A static KV cache of ``workload.cache_len`` positions; allocated now if ``like`` (a cache
    that has run) gives the layers' shapes, else on its first update."""
    from transformers import StaticCache

    try:
        cache = StaticCache(config=model.config, max_cache_len=workload.cache_len)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ConfigError(f"no static KV cache for {type(model).__name__}: {exc}") from exc
    if like is not None:
        layers = like.layers
        cache.early_initialization(
            workload.batch_size, [layer.num_heads for layer in layers],
            [layer.k_head_dim for layer in layers], workload.torch_dtype, workload.device,
        )  # fmt: skip
    return cache


@dataclass
class Run:
    """One generation: its tokens ``(batch, N)``, per-forward seconds, first decode logits."""

    tokens: Any
    prefill_s: float
    steps_s: list[float] = field(default_factory=list)
    first_logits: Any = None

    @property
    def total_s(self) -> float:
        return self.prefill_s + sum(self.steps_s)


class Generation:
    """Greedy generation with one model forward and one static cache, a step at a time."""

    def __init__(self, forward: Callable[..., Any], cache: Any, prompt: torch.Tensor,
                 new_tokens: int, device: str, mark_steps: bool = False) -> None:  # fmt: skip
        import torch

        self.forward, self.cache, self.prompt = forward, cache, prompt
        self.new_tokens, self.device, self.mark_steps = new_tokens, device, mark_steps
        seq = prompt.shape[1]
        self.prefill_positions = torch.arange(seq, device=device)
        self.position = torch.tensor([seq], device=device)  # one tensor, updated in place
        params = inspect.signature(getattr(forward, "forward", forward)).parameters
        self.extra = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self.token: Any = None
        self.logits: Any = None

    def _call(self, ids: torch.Tensor, positions: torch.Tensor) -> None:
        import torch

        if self.mark_steps:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            out = self.forward(input_ids=ids, past_key_values=self.cache,
                               cache_position=positions, use_cache=True, **self.extra)  # fmt: skip
        logits = out.logits if hasattr(out, "logits") else metrics.tensors(out)[0]
        self.logits = logits[:, -1]
        self.token = self.logits.argmax(-1, keepdim=True)

    def prefill(self) -> None:
        """Reset the cache in place and run the prompt: the first token."""
        self.cache.reset()
        self.position.fill_(self.prompt.shape[1])
        self._call(self.prompt, self.prefill_positions)

    def decode(self) -> None:
        """One decode step: the last token in, the next one out."""
        self._call(self.token, self.position)
        self.position.add_(1)

    def run(self, timer: Callable[[Callable[[], Any]], float]) -> Run:
        """A whole generation, every forward timed by ``timer``."""
        prefill_s = timer(self.prefill)
        tokens = [self.token]
        result = Run(None, prefill_s)
        for step in range(self.new_tokens - 1):
            result.steps_s.append(timer(self.decode))
            if step == 0:
                result.first_logits = self.logits.float().clone()
            tokens.append(self.token)
        import torch

        result.tokens = torch.cat(tokens, dim=1)
        return result


def check_tokens(expected: torch.Tensor, actual: torch.Tensor, where: str = "") -> TokenCheck:
    """All greedy tokens equal, or where they first differ."""
    same = (expected == actual).all(dim=0).tolist()
    matched = same.index(False) if False in same else len(same)
    detail = "" if all(same) else f"token {matched + 1} of {len(same)} differs from eager{where}"
    return TokenCheck(all(same), len(same), matched, detail)


def measure(spec: dict[str, Any]) -> Measurement:
    """Measure one strategy on the generate workload (the child's entry for ``generate``)."""

    from autotune import catalog, compile
    from autotune.child import begin

    start, timings, strategy, workload, ref, result = begin(spec)
    seed = spec.get("seed", 0)
    model, inputs = catalog.build(ref, workload)
    timings["build_s"] = time.perf_counter() - start
    prompt, device, n = inputs[0], workload.device, workload.new_tokens
    compiled = generator(model, strategy)
    result.regions = compile.count_regions(getattr(compiled.forward, "compiled", compiled))

    def clock(fn: Callable[[], Any]) -> float:
        return timed(fn, device)

    def first(fn: Callable[[], Any]) -> float:
        return wall(fn, device)[0]

    memory = metrics.PeakMemory(device)
    eager = Generation(model, new_cache(model, workload), prompt, n, device)
    t = time.perf_counter()
    reference = eager.run(first)
    result.eager_first_s = reference.prefill_s + reference.steps_s[0]
    cache = new_cache(model, workload, like=eager.cache)  # fixed addresses before compiling
    mark = uses_cudagraphs(strategy, workload)
    gen = Generation(compiled, cache, prompt, n, device, mark)
    memory.reset()
    run = gen.run(first)  # cold: prefill's graphs, the recompile for decode, decode's graphs
    compile_peak = memory.peak_mb()
    result.compile_s = 0.0 if strategy.granularity == "none" else run.prefill_s + run.steps_s[0]
    timings["first_s"] = time.perf_counter() - t
    result.accuracy = metrics.compare([reference.first_logits], [run.first_logits],
                                      workload.dtype)  # fmt: skip
    tokens = check_tokens(reference.tokens, run.tokens)

    peaks = [0.0, 0.0]
    t = time.perf_counter()
    for _ in range(max(1, spec["warmup"])):
        for i, g in enumerate((eager, gen)):
            memory.reset()
            g.run(clock)
            peaks[i] = max(peaks[i], memory.peak_mb())
    result.memory = Memory(memory.kind, peaks[0], peaks[1], compile_peak)
    timings["warmup_s"] = time.perf_counter() - t

    t = time.perf_counter()
    rounds: dict[str, list[Run]] = {"eager": [], "compiled": []}
    order, rng = list(rounds), random.Random(seed)
    synchronize(device)
    for r in range(spec["iters"]):
        rng.shuffle(order)
        for name in order:
            rounds[name].append((eager if name == "eager" else gen).run(clock))
        if tokens.passed:
            tokens = check_tokens(reference.tokens, rounds["compiled"][-1].tokens,
                                  f" in timed round {r + 1}")  # fmt: skip
    timings["timing_s"] = time.perf_counter() - t
    if not tokens.passed:  # a strategy that changes the tokens is infeasible
        result.accuracy.passed = False
        result.accuracy.detail = "; ".join(filter(None, (tokens.detail, result.accuracy.detail)))
    result.tokens = tokens

    def stats(runs: list[Run]) -> tuple[Latency, Latency, float]:
        decode = Latency.from_samples([s for run in runs for s in run.steps_s])
        prefill = Latency.from_samples([run.prefill_s for run in runs])
        per_s = workload.batch_size * n / statistics.median(run.total_s for run in runs)
        return decode, prefill, per_s

    result.eager_latency, result.eager_ttft, result.eager_tokens_per_s = stats(rounds["eager"])
    result.latency, result.ttft, result.tokens_per_s = stats(rounds["compiled"])
    result.speedup = result.eager_latency.median_ms / result.latency.median_ms

    result.graphs = metrics.graphs()
    if strategy.granularity != "none":
        calls = {"prefill": gen.prefill, "decode": gen.decode}
        result.graphs = recompiles.describe(result.graphs, model, calls)
    result.phases = metrics.phases()
    timings["child_s"] = time.perf_counter() - start
    result.timings = timings
    return result
