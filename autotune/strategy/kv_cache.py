"""The KV cache a generate strategy serves with (``Strategy.kv_cache``), as a deployment sizes it.

- ``"single"`` (the default): one static cache a batch size, as long as the traffic's longest
  prompt plus answer (:attr:`autotune.workload.Workload.cache_len`): one decode graph for every
  request, and every decode step attends over the whole cache.
- ``"pow2"``: a cache a bucket of prompt-plus-answer lengths, each as long as the power of two
  at or above its requests' (``"quantiles"``: the traffic's quartiles of those lengths, its
  longest the last; a longer request's cache is its power of two): shorter requests decode
  against shorter caches, each cache length is a decode graph of its own (a compile, a CUDA
  graph recording), and each cache is memory held.

The trial (:mod:`autotune.trial.scenarios.generations`) keeps one cache a (batch, length) and
resets it in place between requests; :func:`serving` makes ``generate`` do the same, so that
:func:`autotune.apply_generation` serves as measured.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from autotune.traffic import bucket, edges, up_to

KV_CACHES = ("single", "pow2", "quantiles")


def footprint(buckets: str, seq: int, new: int, prompts: tuple[int, ...] | None) -> int:
    """What one request (a prompt of ``seq`` tokens, ``new`` tokens to generate) needs of a
    cache: its prompt plus answer, or its prompt's bucket where the prefill pads it further
    (:mod:`.prefill`; ``prompts``: a quantiles prefill's edges)."""
    from autotune.strategy import prefill

    return max(seq + new, prefill.padded(buckets, seq, prompts))


def footprints(strategy: Any, traffic: Sequence[Sequence[int]],
               answers: Sequence[int]) -> list[int]:  # fmt: skip
    """What each request of a generate traffic (``(batch, prompt)`` and its answer's tokens)
    needs of a cache under ``strategy`` (:func:`footprint`)."""
    from autotune.strategy import prefill

    prompts = [s for _, s in traffic]
    found = prefill.edges_of(strategy.buckets, prompts)
    return [footprint(strategy.buckets, s, n, found)
            for s, n in zip(prompts, answers, strict=True)]  # fmt: skip


def edges_of(kind: str, totals: Sequence[int]) -> tuple[int, ...] | None:
    """The cache lengths a ``quantiles`` strategy allocates for requests of ``totals`` (prompt
    plus answer) tokens; None for the others (single: one length; pow2: each its own)."""
    return edges([(1, t) for t in totals])[1] if kind == "quantiles" and totals else None


def length(kind: str, total: int, single: int, found: tuple[int, ...] | None = None) -> int:
    """The cache length a request of ``total`` tokens (prompt plus answer) is served with:
    ``single`` (never shorter than the request), its power of two, or the smallest of the
    quantile edges ``found`` at or above it."""
    if kind == "pow2":
        return bucket(total)
    if kind == "quantiles" and found:
        return up_to(total, found)
    return max(single, total)


def lengths(kind: str, totals: Sequence[int]) -> tuple[int, ...]:
    """Each request's cache length over a traffic of ``totals`` (prompt plus answer)."""
    found, single = edges_of(kind, totals), max(totals)
    return tuple(length(kind, t, single, found) for t in totals)


def cache_keyword(forward: Callable[..., Any]) -> str:
    """The keyword ``forward`` takes its KV cache by: ``cache`` where its signature has it
    (transformers 5.24 on; there ``past_key_values`` is deprecated, to be removed in 5.40),
    else ``past_key_values`` (transformers 5.0 to 5.23, and models written against them)."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def cache_mb(cache: Any) -> float:
    """MiB that a KV cache's tensors hold (0 for None, or one not allocated yet)."""
    import torch

    tensors = [getattr(layer, name, None) for layer in getattr(cache, "layers", None) or ()
               for name in ("keys", "values")]  # fmt: skip
    return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t)) / 2**20


def serving(gen: Any, strategy: Any, single: int, found: tuple[int, ...] | None,
            traffic: Sequence[Sequence[int]] = ()) -> Callable[..., Any]:  # fmt: skip
    """``gen.generate`` that hands each call the static cache of its bucket (made once a batch
    size and length, reset in place before each use), sized as the trial sized it
    (:func:`footprint`; a quantiles prefill's edges from ``traffic``): a call that says
    ``max_new_tokens`` and brings no cache of its own; any other call is ``gen.generate`` as
    it was. The single kind keeps one cache a batch size, ``single`` long or the generation
    config's ``max_cache_len`` where longer, a longer request's where it needs more (which
    later requests keep, as transformers keeps its longest), so that its tensors keep their
    addresses: transformers makes a new cache at every call."""
    from transformers import StaticCache

    from autotune.strategy import prefill

    original, kept = gen.generate, {}
    keyword = cache_keyword(gen.forward)
    kind, buckets = strategy.kv_cache, strategy.buckets
    prompts = prefill.edges_of(buckets, [s for _, s in traffic])

    @functools.wraps(original)
    def generate(inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        if strategy.uses_cuda_graphs():
            refuse_kept_outputs(gen, kwargs)
        ids = inputs if inputs is not None else kwargs.get("input_ids")
        new = kwargs.get("max_new_tokens")
        mine = "cache" in kwargs or "past_key_values" in kwargs
        if ids is None or not isinstance(new, int) or mine or ids.dim() != 2:
            return original(inputs, *args, **kwargs)
        need, batch = footprint(buckets, ids.shape[1], new, prompts), ids.shape[0]
        # the single cache as long as the generation config says where it says more (a user's
        # max_cache_len, set after apply_generation as transformers reads it at each call)
        config = kwargs.get("generation_config") or gen.generation_config
        most = max(single, getattr(config, "max_cache_len", None) or 0)
        size = (batch, length(kind, need, most, found))
        if kind == "single":  # the longest made yet where it fits, as transformers keeps it
            longest = max((n for b, n in kept if b == batch), default=0)
            if longest >= need:
                size = (batch, longest)
            else:
                kept.pop((batch, longest), None)  # outgrown: not held beside the longer one
        cache = kept.get(size)
        if cache is None:
            cache = kept[size] = StaticCache(config=gen.config, max_cache_len=size[1])
        else:
            cache.reset()
        kwargs.update({keyword: cache, "cache_implementation": None})
        return original(inputs, *args, **kwargs)

    return generate


KEPT = ("output_hidden_states", "output_attentions")  # kept by generate as the forward made them


def refuse_kept_outputs(gen: Any, kwargs: dict[str, Any]) -> None:
    """Raise ConfigError (one line) where a ``generate`` call under CUDA graphs would return
    hidden states or attentions: transformers keeps each step's as the forward returned them
    (the logits it copies), and a CUDA graph's outputs are overwritten by its next replay, so
    reading them raises. The call's keywords, then its ``generation_config``, then ``gen``'s."""
    configs = [kwargs.get("generation_config"), getattr(gen, "generation_config", None)]

    def asked(name: str) -> bool:
        if name in kwargs:
            return bool(kwargs[name])
        return bool(next((getattr(c, name) for c in configs if hasattr(c, name)), False))

    kept = [name for name in KEPT if asked(name)]
    if kept and asked("return_dict_in_generate"):
        from autotune.errors import ConfigError

        raise ConfigError(f"generate(..., {kept[0]}=True) under CUDA graphs: each step's are "
                          "overwritten by the next step's replay; read them with a strategy "
                          "without CUDA graphs (a mode other than reduce-overhead)")  # fmt: skip
