"""The strategies that only matter under traffic: padding buckets, marked dimensions and a
stance.

- ``buckets="pow2"``: every request is padded up to the next power of two in its batch and
  sequence dimensions (``"quantiles"``: up to the next of the traffic's quartiles, its largest
  the last: four buckets whatever the range; a size past the largest pads to its power of
  two; ``"auto"``/``"auto:K"``: up to edges chosen for the traffic by their cost over the
  deployment's lifetime, :mod:`.edges`), with zeros and an ``attention_mask`` that hides them
  where the forward takes one, and the compiled model meets only those shapes, each compiled
  static, as serving engines do:
  calls run under a ``recompile_limit`` of at least the buckets' count (torch's default, 8,
  would serve the rest eager), scoped to the model's calls. Outputs are cut back to the
  request's own rows and positions (a KV cache too); the padding is in the latency, and the
  accuracy gate judges the unpadded part. How a request's arguments are padded:
  :mod:`.padding`.
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
from autotune.strategy import padding
from autotune.strategy.edges import parse as edges_parse
from autotune.traffic import bucket, edges, up_to

BUCKETS = ("none", "pow2", "quantiles", "auto")  # and auto:K (autotune.strategy.edges)
_DIMS = {"none": (), "batch": (0,), "seq": (1,), "both": (0, 1)}
MARKS = (*_DIMS, *(f"{m}-unbacked" for m in _DIMS if m != "none"))
STANCES = ("default", "eager_on_recompile", "eager_then_compile")
NEEDS_SIZE = ("padding buckets and marked dimensions need an input of at least two dimensions "
              "(batch, sequence), by position or as input_ids or inputs_embeds")  # fmt: skip


def is_buckets(value: str) -> bool:
    """Whether ``value`` is a buckets value: one of :data:`BUCKETS`, or ``auto:K``."""
    try:
        return value in BUCKETS or edges_parse(value) is not None
    except ValueError:
        return False


def unbacked_marker() -> Any:
    """torch's ``mark_unbacked`` (None where this torch has none). It is not exported from
    ``torch._dynamo``; a test fails loudly when it moves."""
    from torch._dynamo import decorators

    return getattr(decorators, "mark_unbacked", None)


def count(buckets: str, traffic: Any, chosen: Any = None) -> int:
    """How many buckets the traffic's range can make: (pow2 sizes from the smallest batch's
    bucket to the largest's) x (the same in sequence), or the quantile edges' product (auto:
    the ``chosen`` edges'); 0 with no buckets or no traffic. A size past the traffic's largest
    (a request it never held) pads to its power of two, a bucket counted when it first arrives
    (:class:`Shaped`)."""
    if buckets == "none" or not traffic:
        return 0
    if buckets == "quantiles" or buckets.startswith("auto"):
        batch, seq = chosen if buckets.startswith("auto") else edges(traffic)
        return len(batch) * len(seq) if batch else 0

    def pow2s(values: list[int]) -> int:
        return bucket(max(values)).bit_length() - bucket(min(values)).bit_length() + 1

    return pow2s([b for b, _ in traffic]) * pow2s([s for _, s in traffic])


def bucket_of(size: tuple[int, int], found: tuple[tuple[int, ...], ...] | None) -> tuple[int, int]:
    """The bucket a (batch, sequence) size pads to: the powers of two at or above it, or the
    quantile edges ``found`` (:func:`autotune.traffic.edges`)."""
    if found is None:
        return bucket(size[0]), bucket(size[1])
    return up_to(size[0], found[0]), up_to(size[1], found[1])


def edges_of(buckets: str, traffic: Any, chosen: Any = None) -> Any:
    """The edges a bucket kind pads to: the quantiles' from ``traffic``, auto's ``chosen``
    ones, or None (powers of two)."""
    if buckets == "quantiles":
        return edges(traffic)
    return chosen if buckets.startswith("auto") else None


def hit(buckets: str, traffic: Any, chosen: Any = None) -> int:
    """How many of the buckets of :func:`count` the traffic's requests fall in (0 with no
    buckets): a deployment that pre-warms them all compiles the others too."""
    if buckets == "none" or not traffic or (buckets.startswith("auto") and not chosen):
        return 0
    found = edges_of(buckets, traffic, chosen)
    return len({bucket_of(tuple(r), found) for r in traffic})


def shares(buckets: str, traffic: Any, chosen: Any = None) -> list[dict[str, Any]]:
    """Each bucket the traffic's requests fall in, smallest first: its (batch, sequence), its
    share of the requests, and the share of its computed tokens that are padding."""
    if buckets == "none" or not traffic:
        return []
    found, rows = edges_of(buckets, traffic, chosen), {}
    for b, s in traffic:
        padded = bucket_of((b, s), found)
        n, real = rows.get(padded, (0, 0))
        rows[padded] = (n + 1, real + b * s)
    return [{"bucket": list(padded), "share": n / len(traffic),
             "padding": 1 - real / (n * padded[0] * padded[1])}
            for padded, (n, real) in sorted(rows.items())]  # fmt: skip


def recompile_limit(buckets: str, traffic: Any, chosen: Any = None) -> int | None:
    """The ``recompile_limit`` a bucketed strategy needs for every bucket of ``traffic`` to
    compile (per compiled code object): the buckets' count, never below torch's own (8 by
    default); None without buckets."""
    import torch

    if buckets == "none":
        return None
    return max(count(buckets, traffic, chosen), torch._dynamo.config.recompile_limit)


def regions(compiled: Any) -> int:
    """How many compiled modules may run one code object per bucket: a regional compile's
    (each block's forward is one code object, guarded per block), else 1."""
    from torch._dynamo.eval_frame import OptimizedModule

    if isinstance(compiled, OptimizedModule) or not callable(getattr(compiled, "modules", None)):
        return 1
    return max(1, sum(isinstance(m, OptimizedModule) for m in compiled.modules()))


class Shaped:
    """A callable module stand-in: pads to buckets (:mod:`.padding`) under a recompile limit,
    and/or marks dimensions, then calls the compiled model (its ``module`` attribute)."""

    def __init__(self, compiled: Any, buckets: str, marks: str, stance: str,
                 takes_mask: bool, traffic: Any = (), *, names: tuple[str, ...] = (),
                 limit: int = 0, regions: int = 1, chosen: Any = None) -> None:  # fmt: skip
        import torch

        self.module, self.buckets, self.stance = compiled, buckets, stance
        if buckets == "quantiles" and not traffic:
            raise NotApplicable("quantile buckets need the traffic they were measured on: "
                                "apply the exported file, which carries it")  # fmt: skip
        if buckets.startswith("auto") and not chosen:
            raise NotApplicable("auto buckets need the edges their trial chose: apply the "
                                "exported file, which carries them")  # fmt: skip
        self.edges = edges_of(buckets, traffic, chosen)
        self.dims = _DIMS[marks.removesuffix("-unbacked")]
        self.mark = unbacked_marker() if marks.endswith("-unbacked") else (
            torch._dynamo.maybe_mark_dynamic)  # fmt: skip
        if self.mark is None:
            raise NotApplicable(f"marks {marks!r}: this torch has no mark_unbacked")
        self.takes_mask, self.called, self.names = takes_mask, False, names
        self.regions, self.seen, self.recompile_limit = regions, set[tuple[int, int]](), 0
        self.limits: Any = None  # one torch._dynamo.config.patch, entered around each call
        self.limit_recompiles(limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)

    def limit_recompiles(self, buckets: int) -> None:
        """Let ``buckets`` buckets compile, each once per compiled region: bucketed calls run
        under a ``recompile_limit`` (and ``accumulated_recompile_limit`` where it would bind)
        of at least that many, never below torch's own."""
        import torch

        config, wanted = torch._dynamo.config, buckets * self.regions
        if self.buckets == "none" or wanted <= self.recompile_limit:
            return
        names = ("recompile_limit", "accumulated_recompile_limit")
        changes = {n: wanted for n in names if getattr(config, n) < wanted}
        self.recompile_limit = max(wanted, config.recompile_limit)
        self.limits = config.patch(**changes) if changes else None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch

        first, self.called = not self.called, True
        if self.stance == "default" or (first and self.stance == "eager_on_recompile"):
            return self._call(*args, **kwargs)  # eager_on_recompile: after the first compile
        with torch.compiler.set_stance(self.stance):
            return self._call(*args, **kwargs)

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        if self.buckets != "none":
            return self._padded(args, kwargs)
        if self.dims:
            found = padding.size_of(args, kwargs)
            if found is None:
                raise NotApplicable(NEEDS_SIZE)
            for value in (*args, *kwargs.values()):  # an attention_mask alike
                if padding.shaped(value) and tuple(value.shape[:2]) == found[0]:
                    for dim in self.dims:
                        self.mark(value, dim)
        return self.module(*args, **kwargs)

    def _padded(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One call padded to its bucket, under the recompile limit, cut back."""
        found = padding.size_of(args, kwargs)
        if found is None:
            raise NotApplicable(NEEDS_SIZE)
        size = found[0]
        padded = bucket_of(size, self.edges)
        args, kwargs = padding.arguments(args, kwargs, self.names, found, padded,
                                         self.takes_mask)  # fmt: skip
        if padded not in self.seen:  # a bucket past the traffic's raises the limit too
            self.seen.add(padded)
            self.limit_recompiles(len(self.seen))
        if self.limits is None:
            out = self.module(*args, **kwargs)
        else:
            with self.limits:
                out = self.module(*args, **kwargs)
        return out if padded == size else padding.cut(out, padded, size)


def wrap(compiled: Any, model: Any, buckets: str, marks: str, stance: str,
         traffic: Any = (), chosen: Any = None) -> Any:  # fmt: skip
    """``compiled`` behind padding buckets, marks and a stance (itself when none of them);
    quantile buckets from ``traffic``, auto's from the ``chosen`` edges, and a recompile limit
    that lets each of its buckets compile (:func:`recompile_limit`, times a regional compile's
    regions)."""
    if buckets == "none" and marks == "none" and stance == "default":
        return compiled
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = tuple(n for n, p in params.items() if p.kind in positional)
    limit, takes_mask = count(buckets, traffic, chosen), "attention_mask" in params
    return Shaped(compiled, buckets, marks, stance, takes_mask, traffic, names=names,
                  limit=limit, regions=regions(compiled), chosen=chosen)  # fmt: skip
