"""A generation timed as a user's serving loop times it: one ``model.generate`` call, of the
request's answer length or up to the model's end-of-sequence token, greedy or sampled
(:class:`Decoding`), on the cache it is handed (reset first, outside the clock) or the
one ``generate`` makes itself (transformers' default: what a plain eager user runs), with the
attention mask a tokenizer gives a prompt and the cache on (the catalog builds its models with
it off, for inference); every token stamped as ``generate`` hands it to a
streamer, as a reader of ``TextIteratorStreamer`` sees it arrive.

TTFT runs from the call to the first token: ``generate``'s own set-up, the prefill, the first
token's choice. Each later token's time is the gap since the one before: a decode step with
``generate``'s per-step work (its inputs and masks, logits processors, stopping criteria),
which compiling does not remove. The logits behind each token come back where asked, for the
accuracy gate and the near-tie margins. A streamer copies each token to the host: on a GPU,
one synchronisation a token, on both sides alike.

A judged generation (the first pass's, whose tokens and logits are checked against eager's) is
greedy whatever the decoding: sampled tokens answer a random draw, which two sides computing
the same logits to within rounding may draw differently. Sampling is seeded alike on every
side, outside the clock.
"""

from __future__ import annotations

import functools
import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune import device

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Decoding:
    """How a generation ends and chooses its tokens (the workload's ``stop`` and
    ``sampling``): every one of its new tokens, or up to the model's end-of-sequence token;
    greedy, sampled (``do_sample`` on, the model's generation config's other settings), or
    as the model's generation config says."""

    stop: str = "length"
    sampling: str = "greedy"
    seed: int = 0

    @classmethod
    def of(cls, workload: Any, seed: int = 0, model: Any = None) -> Decoding:
        """The workload's decoding, refused in one line where ``model`` cannot stop so
        (:func:`check_stops`)."""
        decoding = cls(workload.stop, workload.sampling, seed)
        if model is not None:
            check_stops(model, decoding)
        return decoding

    def samples(self, model: Any) -> bool:
        """Whether its timed generations draw their tokens at random on ``model``."""
        config = getattr(model, "generation_config", None)
        return self.sampling == "sample" or (
            self.sampling == "model" and bool(getattr(config, "do_sample", False))
        )

    def kwargs(self, new_tokens: int, judged: bool) -> dict[str, Any]:
        """``generate``'s keywords for an answer of at most ``new_tokens``."""
        out: dict[str, Any] = {"max_new_tokens": new_tokens}
        if self.stop == "length":
            out["min_new_tokens"] = new_tokens
        if judged or self.sampling == "greedy":
            out["do_sample"] = False
        elif self.sampling == "sample":
            out["do_sample"] = True
        return out


GREEDY = Decoding()


def check_stops(model: Any, decoding: Decoding) -> None:
    """Refuse ``stop=eos`` on a model whose generation config names no end-of-sequence token
    (it could never stop), in one line."""
    from autotune.errors import ConfigError

    config = getattr(model, "generation_config", None)
    if decoding.stop == "eos" and getattr(config, "eos_token_id", None) is None:
        raise ConfigError(
            f"--stop eos: {type(model).__name__}'s generation config names no "
            "eos_token_id, so its answers never stop early; use --stop length"
        )


@dataclass
class Run:
    """One generation: its tokens ``(batch, N)``, per-forward seconds, the prefill's and the
    first decode step's logits, and (when asked) the top-two logit margin of each token."""

    tokens: Any
    prefill_s: float
    steps_s: list[float] = field(default_factory=list)
    first_logits: Any = None
    prefill_logits: Any = None
    margins: list[float] = field(default_factory=list)  # per token: min over the batch

    @property
    def total_s(self) -> float:
        return self.prefill_s + sum(self.steps_s)


def tokens_per_s(runs: list[Run], batch: int) -> float:
    """Generated tokens a second, the median over ``runs``: each answer's tokens where it
    ended (its end-of-sequence token, or its length), the batch's rows each, over its
    seconds."""
    import statistics

    return statistics.median(batch * r.tokens.shape[1] / r.total_s for r in runs)


def margin(logits: Any) -> float:
    top = logits.float().topk(2, dim=-1).values
    return float((top[..., 0] - top[..., 1]).min())


def generates(model: Any) -> bool:
    """Whether ``model`` is a transformers model whose own ``generate`` runs it (a compiled
    generator of :func:`autotune.strategy.granularity.generator` is; a bare forward, or
    ``torch.compile``'s wrapper, whose ``generate`` would run the uncompiled model, is not)."""
    from transformers import GenerationMixin

    return isinstance(model, GenerationMixin) and callable(getattr(model, "generate", None))


def figures(began: float, stamps: list[float]) -> tuple[float, list[float]]:
    """A request's figures from its tokens' stamps on the host clock, as every generating
    trial reads them (one ``generate``, a continuous batch's requests): its TTFT from ``began``
    (its call, or its arrival: queueing included) and each later token's seconds."""
    return stamps[0] - began, [b - a for a, b in itertools.pairwise(stamps)]


def stamper() -> Any:
    """A streamer that stamps each ``put`` (the prompt, then each new token) on the host clock."""
    return _stamps()()


@functools.cache
def _stamps() -> type:
    """The streamer's class, made once (transformers is imported only where a trial generates)."""
    from transformers.generation import BaseStreamer

    class Stamps(BaseStreamer):  # type: ignore[misc]
        def __init__(self) -> None:
            self.times: list[float] = []

        def put(self, value: Any) -> None:
            self.times.append(time.perf_counter())

        def end(self) -> None:
            pass

    return Stamps


def run(
    model: Any,
    prompt: torch.Tensor,
    new_tokens: int,
    where: str,
    cache: Any = None,
    keyword: str = "cache",
    logits: bool = False,
    decoding: Decoding = GREEDY,
) -> Run:
    """One ``generate`` of ``new_tokens`` tokens at most (see the module's text): its tokens,
    TTFT and each later token's seconds; with ``logits`` (a judged generation: greedy), the
    first token's and the second's logits and every token's top-two margin."""
    import torch

    stamps = stamper()
    kwargs: dict[str, Any] = {
        "attention_mask": torch.ones_like(prompt), "disable_compile": True, "use_cache": True,
        "streamer": stamps, **decoding.kwargs(new_tokens, judged=logits),
    }  # fmt: skip
    if not logits and decoding.samples(model):
        torch.manual_seed(decoding.seed)
    if cache is not None:
        cache.reset()
        kwargs[keyword] = cache
    if logits:
        kwargs.update(output_logits=True, return_dict_in_generate=True)
    device.synchronize(where)
    began = time.perf_counter()
    with torch.no_grad():
        out = model.generate(prompt, **kwargs)
    ids = out.sequences if logits else out
    times = stamps.times[1:]  # the first put is the prompt's
    result = Run(ids[:, prompt.shape[1] :], *figures(began, times))
    if logits:
        result.prefill_logits = out.logits[0].float().clone()
        result.first_logits = out.logits[1].float().clone() if len(out.logits) > 1 else None
        result.margins = [margin(x) for x in out.logits]
    return result
