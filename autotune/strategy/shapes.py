"""The strategies that only matter under traffic: padding buckets, marked dimensions and a
stance.

- ``buckets="pow2"``: every request is padded up to the next power of two in its batch and
  sequence dimensions (``"quantiles"``: up to the next of the traffic's quartiles, its largest
  the last: four buckets whatever the range), with zeros and an ``attention_mask`` that hides
  them where the forward takes one, and the compiled model meets only those shapes, each
  compiled static, as serving engines do. Outputs are cut back to the request's own rows and
  positions; the padding is in the latency, and the accuracy gate judges the unpadded part.
- ``marks="batch"|"seq"|"both"``: the inputs' batch and/or sequence dimension is marked dynamic
  (``torch._dynamo.maybe_mark_dynamic``) before each call, so that the first compile is already
  dynamic there instead of static first and dynamic on the second shape; ``…-unbacked``
  marks them unbacked (``mark_unbacked``: no guard on the size at all, and no 0/1
  specialisation), where this torch has it and the model traces with it.
- ``stance="eager_on_recompile"|"eager_then_compile"``: calls run under
  ``torch.compiler.set_stance``: after the first call's compile, a shape that would recompile
  runs eager instead (no stall after the first compile); or the first call runs eager and the
  compile infers its dynamic dimensions from the first two calls.

:func:`wrap` puts either around a compiled model; ``autotune.apply`` does the same, so a
user's process does what was measured.
"""

from __future__ import annotations

import inspect
from typing import Any

from autotune.errors import NotApplicable

BUCKETS = ("none", "pow2", "quantiles")
QUANTILES = (0.25, 0.5, 0.75, 1.0)  # the edges of quantile buckets, in each dimension
_DIMS = {"none": (), "batch": (0,), "seq": (1,), "both": (0, 1)}
MARKS = (*_DIMS, *(f"{m}-unbacked" for m in _DIMS if m != "none"))
STANCES = ("default", "eager_on_recompile", "eager_then_compile")


def unbacked_marker() -> Any:
    """torch's ``mark_unbacked`` (None where this torch has none). It is not exported from
    ``torch._dynamo``; a test fails loudly when it moves."""
    from torch._dynamo import decorators

    return getattr(decorators, "mark_unbacked", None)


def bucket(n: int) -> int:
    """The power of two at or above ``n``."""
    return 1 << max(0, n - 1).bit_length()


def edges(traffic: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Quantile buckets' edges in batch and sequence: the traffic's quartiles (nearest rank),
    the largest size last."""

    def quartiles(values: list[int]) -> tuple[int, ...]:
        ordered = sorted(values)
        ranks = [max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.5) - 1)) for q in QUANTILES]
        return tuple(sorted({ordered[r] for r in ranks}))

    return quartiles([b for b, _ in traffic]), quartiles([s for _, s in traffic])


def up_to(n: int, found: tuple[int, ...]) -> int:
    """The smallest edge at or above ``n`` (``n`` itself past the largest)."""
    return next((e for e in found if e >= n), n)


def _shaped(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.dim() >= 2


def pad(value: Any, size: tuple[int, int]) -> Any:
    """A tensor grown with zeros to ``size`` in its first two dimensions."""
    import torch

    grow = (0, 0) * (value.dim() - 2) + (0, size[1] - value.shape[1], 0, size[0] - value.shape[0])
    return torch.nn.functional.pad(value, grow) if any(grow) else value


def cut(value: Any, padded: tuple[int, int], size: tuple[int, int]) -> Any:
    """Outputs cut back from the padded shape to the request's: every tensor whose first two
    dimensions are the padded ones (containers keep their type)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.dim() >= 2 and tuple(value.shape[:2]) == padded:
            return value[: size[0], : size[1]]
        return value
    if isinstance(value, dict):  # transformers' ModelOutput is a dict too
        return type(value)(**{k: cut(v, padded, size) for k, v in value.items()})
    if isinstance(value, (tuple, list)):
        return type(value)(cut(v, padded, size) for v in value)
    return value


class Shaped:
    """A callable module stand-in: pads to buckets and/or marks dimensions, then calls the
    compiled model (its ``module`` attribute)."""

    def __init__(self, compiled: Any, buckets: str, marks: str, stance: str,
                 takes_mask: bool, traffic: Any = ()) -> None:  # fmt: skip
        import torch

        self.module, self.buckets, self.stance = compiled, buckets, stance
        if buckets == "quantiles" and not traffic:
            raise NotApplicable("quantile buckets need the traffic they were measured on: "
                                "apply the exported file, which carries it")  # fmt: skip
        self.edges = edges(traffic) if buckets == "quantiles" else None
        self.dims = _DIMS[marks.removesuffix("-unbacked")]
        self.mark = unbacked_marker() if marks.endswith("-unbacked") else (
            torch._dynamo.maybe_mark_dynamic)  # fmt: skip
        if self.mark is None:
            raise NotApplicable(f"marks {marks!r}: this torch has no mark_unbacked")
        self.takes_mask, self.called = takes_mask, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch

        first, self.called = not self.called, True
        if self.stance == "default" or (first and self.stance == "eager_on_recompile"):
            return self._call(*args, **kwargs)  # eager_on_recompile: after the first compile
        with torch.compiler.set_stance(self.stance):
            return self._call(*args, **kwargs)

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        import torch

        first = next((a for a in args if _shaped(a)), None)
        if first is None:
            raise NotApplicable("padding buckets and marked dimensions need an input of at "
                                "least two dimensions (batch, sequence)")  # fmt: skip
        size = (first.shape[0], first.shape[1])
        if self.buckets != "none":  # every call alike: padded (perhaps by nothing), masked
            padded = (bucket(size[0]), bucket(size[1])) if self.edges is None else (
                up_to(size[0], self.edges[0]), up_to(size[1], self.edges[1]))  # fmt: skip
            same = [_shaped(a) and tuple(a.shape[:2]) == size for a in args]
            args = tuple(pad(a, padded) if s else a for a, s in zip(args, same, strict=True))
            mask = kwargs.get("attention_mask")
            if mask is None and self.takes_mask:
                mask = torch.ones(size, dtype=torch.long, device=first.device)
            if mask is not None:
                kwargs["attention_mask"] = pad(mask, padded)
            return cut(self.module(*args, **kwargs), padded, size)
        for a in args if self.dims else ():
            if _shaped(a) and tuple(a.shape[:2]) == size:
                for dim in self.dims:
                    self.mark(a, dim)
        return self.module(*args, **kwargs)


def wrap(compiled: Any, model: Any, buckets: str, marks: str, stance: str,
         traffic: Any = ()) -> Any:  # fmt: skip
    """``compiled`` behind padding buckets, marks and a stance (itself when none of them);
    quantile buckets from ``traffic``."""
    if buckets == "none" and marks == "none" and stance == "default":
        return compiled
    try:
        takes_mask = "attention_mask" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        takes_mask = False
    return Shaped(compiled, buckets, marks, stance, takes_mask, traffic)
