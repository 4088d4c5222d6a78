"""One request's arguments and outputs through a padding bucket, as
:class:`autotune.strategy.shapes.Shaped` serves it (called as transformers' users call it).

A request's size (batch, sequence) is that of its first positional tensor of two or more
dimensions, else of ``input_ids`` or ``inputs_embeds``, else of any such keyword. Every tensor
argument, positional or keyword, whose first two dimensions are the request's is padded alike
to the bucket (and, for marks, marked alike): with zeros (ids, embeddings, ``token_type_ids``,
an ``attention_mask`` that hides the padding), positions that go on counting
(``position_ids``), or ``-100`` (``labels``: the loss ignores them). Another keyword of that
size, a KV cache passed in, or ``logits_to_keep`` is refused in one line. Outputs are cut back
to the request's rows and positions: every tensor's first dimension where it is the bucket's
batch (pooled outputs and a classifier's logits included), its second where it is the bucket's
length, and a transformers ``Cache`` (cropped in sequence, its rows selected).
"""

from __future__ import annotations

import sys
from typing import Any

from autotune.errors import NotApplicable

Size = tuple[int, int]
SOURCES = ("input_ids", "inputs_embeds")  # where a call by keyword has its size, in this order
FILL = {"input_ids": 0, "inputs_embeds": 0, "token_type_ids": 0, "attention_mask": 0,
        "labels": -100}  # fmt: skip
POSITIONS = "position_ids"
CACHES = ("cache", "past_key_values")
NO_CACHE = "pass use_cache=False"
PAST = ("cannot be padded to a bucket: call without one, or with an empty DynamicCache "
        "(to generate: autotune.apply_generation)")  # fmt: skip


def shaped(value: Any) -> bool:
    """Whether ``value`` is a tensor of at least two dimensions (batch, sequence)."""
    import torch

    return isinstance(value, torch.Tensor) and value.dim() >= 2


def pad(value: Any, size: Size, fill: int = 0) -> Any:
    """A tensor grown with ``fill`` to ``size`` in its first two dimensions."""
    import torch

    grow = (0, 0) * (value.dim() - 2) + (0, size[1] - value.shape[1], 0, size[0] - value.shape[0])
    return torch.nn.functional.pad(value, grow, value=fill) if any(grow) else value


def positions(value: Any, size: Size) -> Any:
    """Position ids grown to ``size``: each row goes on counting, new rows repeat the first."""
    import torch

    if more := size[1] - value.shape[1]:
        step = torch.arange(1, more + 1, dtype=value.dtype, device=value.device)
        step = step.view(1, more, *([1] * (value.dim() - 2)))
        value = torch.cat([value, value[:, -1:] + step], dim=1)
    if rows := size[0] - value.shape[0]:
        value = torch.cat([value, value[:1].expand(rows, *value.shape[1:])], dim=0)
    return value


def is_cache(value: Any) -> bool:
    """Whether ``value`` is a transformers ``Cache`` (never imports transformers)."""
    found = sys.modules.get("transformers.cache_utils")
    return found is not None and isinstance(value, found.Cache)


def cut_cache(cache: Any, padded: Size, size: Size) -> None:
    """A KV cache filled at the bucket's size, cut back in place to the request's (transformers'
    ``crop`` and ``batch_select_indices``); refused in one line where it cannot be."""
    import torch

    try:
        if padded[1] > size[1]:
            cache.crop(size[1] - padded[1])  # negative: the tokens to remove
        if padded[0] > size[0]:
            cache.batch_select_indices(torch.arange(size[0]))
    except (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError) as exc:
        raise NotApplicable(f"the {type(cache).__name__} this model returned cannot be cut back "
                            f"from its bucket ({exc}): {NO_CACHE}") from None  # fmt: skip


PER_TOKEN = ("start_logits", "end_logits")  # 2-D outputs of one score per position
POOLED = "pool"  # in an output's name: one vector per row (pooler_output), never positions


def cut(value: Any, padded: Size, size: Size, name: str = "") -> Any:
    """Outputs cut back from the padded shape to the request's: every tensor's rows where its
    first dimension is the padded batch (a pooled output's, a classifier's logits: the padded
    rows' mask hides everything, and their mean is NaN), its positions where its second is
    the padded length, and a KV cache (containers keep their type)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.dim() >= 1 and padded[0] != size[0] and value.shape[0] == padded[0]:
            value = value[: size[0]]  # the padded rows: a pooled output's or a classifier's too
        if value.dim() >= 2 and value.shape[1] == padded[1] and padded[1] != size[1]:
            if value.dim() == 2 and POOLED in name:
                return value
            if value.dim() == 2 and name not in PER_TOKEN:  # (rows, positions) or features?
                raise NotApplicable(
                    f"padding buckets cannot tell whether output {name or 'tensor'} of shape "
                    f"{tuple(value.shape)} holds positions or features ({padded[1]} either "
                    "way): use another bucket or no buckets"
                )  # fmt: skip
            value = value[:, : size[1]]
        return value
    if is_cache(value):
        cut_cache(value, padded, size)
        return value
    if isinstance(value, dict):  # transformers' ModelOutput is a dict too
        items = list(value.items())  # (not .get: transformers warns on a deprecated key)
        for key, found in items:
            if key in CACHES and found is not None and not is_cache(found):
                raise NotApplicable(f"a {type(found).__name__} KV cache ({key}) cannot be cut "
                                    f"back from its bucket: {NO_CACHE}")  # fmt: skip
        return type(value)(**{k: cut(v, padded, size, str(k)) for k, v in items})
    if isinstance(value, (tuple, list)):
        return type(value)(cut(v, padded, size, name) for v in value)
    return value


def past(value: Any) -> bool:
    """Whether a cache argument holds something a padded call would break: past tokens, fixed
    positions (a static cache), or a layout autotune does not know (legacy tuples)."""
    if value is None:
        return False
    if not is_cache(value):
        return True
    return bool(value.get_seq_length() or getattr(value, "is_compileable", False))


def refused(name: str | None, value: Any) -> str:
    """Why an argument cannot be served padded ("" when it can)."""
    import torch

    if name in CACHES and past(value):
        return f"a KV cache passed in ({name}=...) {PAST}"
    if name == "logits_to_keep" and not (isinstance(value, int) and value == 0):
        return ("logits_to_keep would count from the end of the padded sequence: call with "
                "logits_to_keep=0 and take the last logits of the result")  # fmt: skip
    if name == "attention_mask" and isinstance(value, torch.Tensor) and value.dim() != 2:
        return f"a {value.dim()}-D attention_mask cannot be padded to a bucket: pass a 2-D one"
    return ""


def size_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Size, str] | None:
    """The request's (batch, sequence) and the keyword it was read from ("" by position); None
    where no argument has two dimensions."""
    found = next((("", a) for a in args if shaped(a)), None)
    found = found or next(((k, kwargs[k]) for k in SOURCES if shaped(kwargs.get(k))), None)
    found = found or next(((k, v) for k, v in kwargs.items() if shaped(v)), None)
    return None if found is None else ((found[1].shape[0], found[1].shape[1]), found[0])


def grown(name: str | None, value: Any, size: Size, padded: Size, source: str,
          positional: bool = False) -> Any:  # fmt: skip
    """One argument as the bucket needs it; refused in one line where it cannot be."""
    if why := refused(name, value):
        raise NotApplicable(why)
    if not shaped(value) or tuple(value.shape[:2]) != size:
        return value
    if name == POSITIONS:
        return positions(value, padded)
    if name in FILL or positional or name == source:
        return pad(value, padded, FILL.get(name or "", 0))
    raise NotApplicable(
        f"padding buckets cannot pad keyword {name!r} (its first two dimensions are the "
        f"request's, {size}): only {', '.join([*FILL, POSITIONS])} and positional inputs; "
        "call without it, or use a strategy without buckets"
    )


def arguments(args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...],
              found: tuple[Size, str], padded: Size,
              takes_mask: bool) -> tuple[list[Any], dict[str, Any]]:  # fmt: skip
    """A call's arguments padded from the request's size (``found`` by :func:`size_of`) to
    ``padded``, positional ones named by the forward's ``names``; with an ``attention_mask``
    that hides the padding where the forward takes one and the call gave none."""
    import torch

    size, source = found
    named = [names[i] if i < len(names) else None for i in range(len(args))]
    padded_args = [grown(n, a, size, padded, source, positional=True)
                   for n, a in zip(named, args, strict=True)]  # fmt: skip
    padded_kwargs = {k: grown(k, v, size, padded, source) for k, v in kwargs.items()}
    where = named.index("attention_mask") if "attention_mask" in named else None
    mask = padded_kwargs.get("attention_mask") if where is None else padded_args[where]
    if mask is None and takes_mask:  # every call alike: masked, padded or not
        device = next(v for v in (*args, *kwargs.values()) if shaped(v)).device
        mask = pad(torch.ones(size, dtype=torch.long, device=device), padded)
        if where is None:
            padded_kwargs["attention_mask"] = mask
        else:
            padded_args[where] = mask
    return padded_args, padded_kwargs
