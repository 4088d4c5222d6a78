"""A generate strategy's prefill, the forward of a prompt's tokens: compiled as the decode steps
are, left eager (``prefill="eager"``, as transformers' own ``compile_config`` does), or compiled
and padded up to a bucket of prompt lengths (``buckets="pow2"|"quantiles"``: the power of two at
or above the prompt's length, or the traffic's quartiles of them), so that the prompt lengths a
deployment meets compile one static prefill graph a bucket, as serving engines capture sizes.

A prompt of ``s`` tokens padded to its bucket ``S``: ``input_ids`` right-padded with its last
token (any id does: causal attention keeps the prompt's positions from ever seeing the pads),
``cache_position`` and ``position_ids`` run on to ``S``, an ``attention_mask`` padded with ones,
every position's logits computed and cut back to the prompt's own, and the cache's length cut
back to ``s`` (``Cache.crop``). The KV cache then holds the pads' keys and values at
``s..S-1``: each decode step writes its own position before any step attends to it, and the
causal mask hides the later ones. A cache that cannot be cut is not padded for; a bucket past
the cache's length is cut to it, so a request longer than any measured still runs (a graph of
its own). A sliding-window layer can be cut only while it has never held more than its window
(transformers' ``is_croppable``): where a cache says it cannot be cut, a prompt is padded only
up to its smallest window, and a longer one is not padded (a graph of its own). The masks that
``generate`` builds for a compileable cache (4-D, or one per attention kind in a dict, as for
Gemma-2 and Mistral) are padded with the ids: a pad's row repeats the prompt's last, a pad's
key column is masked for every row.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from autotune.traffic import bucket, edges, up_to

PREFILL_BUCKETS = ("none", "pow2", "quantiles")  # auto's pilot times inference's forward only


def edges_of(buckets: str, prompts: Sequence[int]) -> tuple[int, ...] | None:
    """The prompt lengths a ``quantiles`` prefill pads to, from the traffic's ``prompts``."""
    return edges([(1, s) for s in prompts])[1] if buckets == "quantiles" and prompts else None


def padded(buckets: str, seq: int, found: tuple[int, ...] | None = None) -> int:
    """The length a prompt of ``seq`` tokens is padded to (``seq`` itself without buckets)."""
    if buckets == "pow2":
        return bucket(seq)
    if buckets == "quantiles" and found:
        return up_to(seq, found)
    return seq


def _max_length(cache: Any) -> int | None:
    """A static cache's length (None where the cache does not say one)."""
    getter = getattr(cache, "get_max_length", None)
    length = getter() if callable(getter) else None
    return length if isinstance(length, int) and length > 0 else None


def _croppable_to(cache: Any) -> int | None:
    """How far a prompt may be padded and the cache still cut back exactly: None where the
    cache can always be cut; a sliding window's length where only sliding layers cannot
    (they can while within it); 0 where another layer cannot."""
    if getattr(cache, "is_croppable", True) is not False:
        return None
    windows = []
    for layer in getattr(cache, "layers", []):
        if getattr(layer, "is_croppable", True) is False:
            if not getattr(layer, "is_sliding", False):
                return 0
            windows.append(int(getattr(layer, "max_cache_len", 0) or 0))
    return min(windows) if windows else 0


def _padded_mask(mask: Any, extra: int) -> Any:
    """An attention mask for the ids with ``extra`` pads: a 2-D mask padded with ones; a 4-D
    one (``batch, heads, query, key``) with ``extra`` rows that repeat its last and, where its
    keys are the query's (no static cache's length), ``extra`` key columns masked for every
    row; a dict of them, each; anything else (None, a block mask) as it is."""
    import torch

    if isinstance(mask, dict):
        return {k: _padded_mask(v, extra) for k, v in mask.items()}
    if not torch.is_tensor(mask):
        return mask
    if mask.dim() == 2:
        return torch.cat([mask, mask.new_ones(mask.shape[0], extra)], 1)
    if mask.dim() != 4:
        return mask
    rows = torch.cat([mask, mask[:, :, -1:].expand(-1, -1, extra, -1)], dim=2)
    if mask.shape[-1] != mask.shape[-2]:  # keys of a fixed length: the pads' are there
        return rows
    off = False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min
    return torch.cat([rows, rows.new_full((*rows.shape[:3], extra), off)], dim=3)


def padding(compiled: Callable[..., Any], model: Any, buckets: str,
            found: tuple[int, ...] | None) -> Callable[..., Any]:  # fmt: skip
    """``compiled`` whose prefill calls pad their prompt to its bucket (see the module's text);
    decode steps, one token a sequence, pass through."""
    import torch

    keeps = "logits_to_keep" in inspect.signature(model.forward).parameters

    def call(*args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if (ids is None or ids.dim() != 2 or ids.shape[1] < 2 or not keeps or len(args) > 1
                or not callable(getattr(cache, "crop", None))):  # fmt: skip
            return compiled(*args, **kwargs)
        seq = ids.shape[1]
        size = padded(buckets, seq, found)
        if (most := _max_length(cache)) is not None:
            size = min(size, most)
        if (window := _croppable_to(cache)) is not None:
            size = min(size, window)
        if size <= seq:
            return compiled(*args, **kwargs)
        extra = size - seq
        kwargs["input_ids"] = torch.cat([ids, ids[:, -1:].expand(-1, extra)], dim=1)
        args = ()
        for name in ("cache_position", "position_ids"):
            if (given := kwargs.get(name)) is not None:
                more = given[..., -1:] + torch.arange(1, extra + 1, device=given.device)
                kwargs[name] = torch.cat([given, more.expand(*given.shape[:-1], extra)], dim=-1)
        if "attention_mask" in kwargs:
            kwargs["attention_mask"] = _padded_mask(kwargs["attention_mask"], extra)
        keep = kwargs.get("logits_to_keep", 0)
        kwargs["logits_to_keep"] = 0  # every position: the prompt's last is not the last now
        out = compiled(**kwargs)
        cache.crop(-extra)  # the cache's length back to the prompt's: decode writes from there
        logits = out.logits[:, :seq]
        if torch.is_tensor(keep):  # the positions asked for
            logits = logits[:, keep]
        elif isinstance(keep, int) and keep > 0:
            logits = logits[:, -keep:]
        out.logits = logits
        return out

    return call
