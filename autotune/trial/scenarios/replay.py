"""One pass of an arrival traffic through a continuous-batching manager, with the user's own
calls: ``add_request`` at each request's arrival (or, for a closed loop, as soon as one of
its ``concurrency`` requests in flight ends), ``get_result`` until every answer is in.

Per request, from transformers' own per-token timestamps (``record_timestamps``, on
``time.perf_counter``'s clock, as the arrivals are): TTFT from its arrival (queueing
included), time per output token after the first, its whole time in the server, and its
tokens. Over the pass: p50 and p90 of TTFT and TPOT, output tokens a second over the pass's
span, and goodput (requests a second that met both targets of an SLO).

:func:`manager` builds the manager as a user would (``init_continuous_batching`` with a
``GenerationConfig`` and a ``ContinuousBatchingConfig``), its warm-up timed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import autotune.device
from autotune.strategy import batching
from autotune.trial.measurement import quantile
from autotune.trial.scenarios import served

if TYPE_CHECKING:
    from autotune.trial.scenarios.eager_batches import Watch

WAIT_S = 600.0  # at most, with requests in flight and no answer (a compile may stall that long)


@dataclass
class Served:
    """One request as served: arrival (s from the pass's start), TTFT, TPOT and time in the
    server (ms), and its tokens."""

    arrival_s: float
    ttft_ms: float
    tpot_ms: float
    total_ms: float
    tokens: list[int]


@dataclass
class Pass:
    """An arrival traffic served once: each request's figures, and the pass's span (s)."""

    requests: list[Served]
    span_s: float

    def quantile(self, name: str, q: float) -> float:
        """The ``q`` quantile of a request figure (``ttft_ms``, ``tpot_ms``, ``total_ms``)."""
        return quantile(sorted(getattr(r, name) for r in self.requests), q)

    @property
    def mean_ms(self) -> float:
        """The mean time a request spent in the server (ms): a pass's sample."""
        return sum(r.total_ms for r in self.requests) / len(self.requests)

    @property
    def tokens_per_s(self) -> float:
        """Output tokens a second over the pass's span (first arrival to last answer)."""
        return sum(len(r.tokens) for r in self.requests) / max(self.span_s, 1e-9)

    def goodput(self, ttft_ms: float | None, tpot_ms: float | None) -> float:
        """Requests a second that met both targets (a missing target is met)."""
        met = [r for r in self.requests
               if (ttft_ms is None or r.ttft_ms <= ttft_ms)
               and (tpot_ms is None or r.tpot_ms <= tpot_ms)]  # fmt: skip
        return len(met) / max(self.span_s, 1e-9)

    def summary(self, slo: tuple[float | None, float | None] = (None, None)) -> dict[str, Any]:
        """The pass's figures, as stored."""
        return {"ttft_p50_ms": self.quantile("ttft_ms", 0.5),
                "ttft_p90_ms": self.quantile("ttft_ms", 0.9),
                "tpot_p50_ms": self.quantile("tpot_ms", 0.5),
                "tpot_p90_ms": self.quantile("tpot_ms", 0.9),
                "total_mean_ms": self.mean_ms,
                "tokens_per_s": self.tokens_per_s, "goodput": self.goodput(*slo),
                "span_s": self.span_s}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"requests": [asdict(r) for r in self.requests], "span_s": self.span_s}


def prompts(model: Any, workload: Any, seed: int) -> list[list[int]]:
    """Each request's prompt: token ids of its length, drawn from the model's vocabulary by
    ``seed`` (the trial and the self-check's loop draw the same)."""
    import torch

    vocab = int(model.config.get_text_config().vocab_size)
    draw = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (s,), generator=draw).tolist() for _, s in workload.traffic]


def manager(model: Any, config: Any, answers: list[int],
            watch: Watch | None = None) -> tuple[Any, float]:  # fmt: skip
    """A started manager for ``model`` with ``config`` (a ``ContinuousBatchingConfig``, or its
    keywords), greedy to each request's own length, and the seconds its warm-up and start took
    (time to ready); ``watch`` watches the thread it serves from."""
    import torch
    import transformers

    generation = transformers.GenerationConfig(
        do_sample=False, max_new_tokens=max(answers), eos_token_id=-1,
        pad_token_id=getattr(model.config, "pad_token_id", None) or 0,
    )  # fmt: skip
    start = time.perf_counter()
    with torch.inference_mode():
        made = model.init_continuous_batching(
            generation_config=generation,
            continuous_batching_config=(
                batching.config_object(config) if isinstance(config, dict) else config
            ),
        )
        made.warmup()
        # its loop runs in inference mode, as its warm-up's tensors were made
        made.start() if watch is None else watch.attach(made.start)
    return made, time.perf_counter() - start


@contextlib.contextmanager
def batches(model: Any, device: str = "cpu",
            timed: bool = True) -> Iterator[list[tuple[int, int, float]]]:  # fmt: skip
    """Yield a list that gets, for each batch ``model`` runs in the block, its query tokens,
    the cache tokens it read before them and its forward's seconds (synchronised on
    ``device``; untimed, 0 and no synchronisation: a pass whose own figures count): forward
    hooks, for an eager manager only, whose calls Dynamo does not trace."""
    found: list[tuple[int, int, float]] = []
    began: list[tuple[int, int, float]] = []

    def seen(_: Any, args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        reads = kwargs.get("read_index") or []
        q = int(ids.shape[-1])
        past = max(0, max((int(r.numel()) for r in reads), default=0) - q)
        if not timed:
            return found.append((q, past, 0.0))
        autotune.device.synchronize(device)
        began.append((q, past, time.perf_counter()))

    def done(*_: Any) -> None:
        autotune.device.synchronize(device)
        q, past, start = began.pop()
        found.append((q, past, time.perf_counter() - start))

    handles = [model.register_forward_pre_hook(seen, with_kwargs=True)]
    if timed:
        handles.append(model.register_forward_hook(done))
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


def serve(made: Any, prompts: list[list[int]], answers: list[int], arrivals: list[float],
          concurrency: int | None = None, tag: str = "") -> Pass:  # fmt: skip
    """Serve every request once through a started manager: at its arrival (``arrivals``, s from
    now), or, with ``concurrency``, as a closed loop of that many in flight. A manager that
    hands back no answer for :data:`WAIT_S` while requests are in flight is an error."""
    n = len(prompts)
    sent: dict[str, float] = {}
    done: dict[str, Any] = {}
    start = time.perf_counter()

    def send(i: int, at: float) -> None:
        rid = f"{tag}r{i}"
        made.add_request(prompts[i], request_id=rid, max_new_tokens=answers[i],
                         record_timestamps=True)  # fmt: skip
        sent[rid] = at

    quiet = [time.perf_counter()]  # when the last answer came back

    def collect(timeout: float) -> bool:
        result = made.get_result(timeout=timeout)
        if result is None:
            if not made.is_running():
                raise RuntimeError("the continuous-batching manager stopped before every "
                                   "answer was in")  # fmt: skip
            if len(sent) > len(done) and time.perf_counter() - quiet[0] > WAIT_S:
                raise RuntimeError(f"no answer in {WAIT_S:.0f} s with "
                                   f"{len(sent) - len(done)} requests in flight")  # fmt: skip
            return False
        if result.error is not None:
            raise RuntimeError(f"request {result.request_id} failed: {result.error}")
        if result.is_finished():
            done[result.request_id] = result
            quiet[0] = time.perf_counter()
            return True
        return False

    if concurrency:
        for i in range(min(concurrency, n)):
            send(i, time.perf_counter())
        following = min(concurrency, n)
        while len(done) < n:
            if collect(1.0) and following < n:
                send(following, time.perf_counter())
                following += 1
    else:
        for i, at in enumerate(arrivals):
            while (wait := start + at - time.perf_counter()) > 0:
                collect(min(wait, 0.05))
            send(i, start + at)
        while len(done) < n:
            collect(1.0)
    found = [_served(done[f"{tag}r{i}"], sent[f"{tag}r{i}"], start) for i in range(n)]
    last = max(r.arrival_s + r.total_ms / 1e3 for r in found)
    return Pass(found, last - min(r.arrival_s for r in found))


def _served(result: Any, sent: float, start: float) -> Served:
    stamps = list(result.timestamps or [])
    tokens = list(result.generated_tokens)
    if not stamps:  # no timestamps recorded: nothing to time it by
        raise RuntimeError(f"request {result.request_id} came back without its timestamps")
    ttft_s, steps_s = served.figures(sent, stamps)
    return Served(arrival_s=sent - start, ttft_ms=ttft_s * 1e3,
                  tpot_ms=sum(steps_s) / len(steps_s) * 1e3 if steps_s else 0.0,
                  total_ms=(stamps[-1] - sent) * 1e3, tokens=tokens)  # fmt: skip
