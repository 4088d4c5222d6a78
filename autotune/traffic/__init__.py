"""Traffic: the requests a deployment serves, in arrival order, each a ``(batch_size, seq_len)``
shape. A study measures one shape unless it is given a traffic.

A traffic comes from a file (``--traffic FILE``: JSON lines or CSV with ``batch_size`` and
``seq_len`` columns; a real request log or a published trace works as it is:
:mod:`autotune.traffic.files`) or from short forms: ``--seq-len 16..512`` draws lengths
log-uniformly (seeded, so the same command plays the same requests), ``--seq-len 32,128,512``
draws from a list, the same for ``--batch-size``, and ``--requests N`` says how many requests
to play. Bad traffic is refused in one line that names its line.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

from autotune.errors import ConfigError
from autotune.traffic.files import read_file, request

Shape = tuple[int, int]  # (batch_size, seq_len)
DEFAULT_REQUESTS = 48  # a spread's requests: enough to meet most lengths of a range once
STEADY_SHAPES = 8  # the distinct shapes timed in the steady state, at most (see steady())
STATIC_COMPILES = 8  # torch's recompile limit: a static compile's graphs per code object
QUANTILES = (0.25, 0.5, 0.75, 1.0)  # the edges of quantile buckets, in each dimension
REFERENCE_SHAPES = 64  # the distinct shapes the study's reference covers, at most


def is_spread(value: Any) -> bool:
    """Whether a ``--seq-len``/``--batch-size`` value is a range or a list, not one number."""
    return isinstance(value, str) and (".." in value or "," in value)


def whole_or_spread(minimum: int) -> Any:
    """A config reader: a whole number, or a spread (``16..512``, ``32,128``) kept as text."""

    def reader(value: Any, key: str) -> int | str:
        if isinstance(value, str) and not is_spread(value):
            value = int(value) if value.strip().isdigit() else value
        if is_spread(value):
            spread(value, key)  # checked now, drawn by the workload
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(
                f"{key} = {value!r}: expected a whole number of at least "
                f"{minimum}, a range such as 16..512 or a list such as 32,128"
            )
        return value

    return reader


def spread(text: str, key: str) -> tuple[str, list[int]]:
    """``16..512`` -> ("range", [16, 512]); ``32,128`` -> ("list", [32, 128])."""
    kind, parts = ("range", text.split("..")) if ".." in text else ("list", text.split(","))
    try:
        numbers = [int(p.strip()) for p in parts if p.strip()]
    except ValueError:
        numbers = []
    if not numbers or min(numbers) < 1 or (kind == "range" and len(numbers) != 2):
        raise ConfigError(f"{key} = {text!r}: expected LOW..HIGH or a comma list of whole "
                          "numbers of at least 1")  # fmt: skip
    if kind == "range" and numbers[0] > numbers[1]:
        raise ConfigError(f"{key} = {text!r}: the range's low end is above its high end")
    return kind, numbers


def draw(
    batch: int | str, seq: int | str, requests: int | None, seed: int = 0,
    answers: int | str | None = None,
) -> tuple[tuple[int, ...], ...]:  # fmt: skip
    """Requests drawn from short forms: a range log-uniformly, a list uniformly (seeded);
    with ``answers`` (a generate traffic's ``--new-tokens``), each request's answer too."""
    rng = random.Random(seed)

    def one(value: int | str, key: str) -> Any:
        if not is_spread(value):
            return lambda: value
        kind, numbers = spread(str(value), key)
        if kind == "list":
            return lambda: rng.choice(numbers)
        lo, hi = math.log(numbers[0]), math.log(numbers[1] + 1)
        return lambda: min(numbers[1], int(math.exp(rng.uniform(lo, hi))))

    b, s = one(batch, "--batch-size"), one(seq, "--seq-len")
    if answers is None:
        return tuple((b(), s()) for _ in range(requests or DEFAULT_REQUESTS))
    a = one(answers, "--new-tokens")
    return tuple((b(), s(), a()) for _ in range(requests or DEFAULT_REQUESTS))


def read(value: Any, key: str) -> tuple[tuple[int, ...], ...]:
    """A config reader for the workload's traffic: a file's path, or the requests themselves
    (a stored study's list of ``[batch_size, seq_len]`` pairs; a generate traffic's
    ``[batch_size, seq_len, new_tokens]``, which the workload splits)."""
    if isinstance(value, str):
        return read_file(value)
    if isinstance(value, (list, tuple)):
        shapes = []
        for n, item in enumerate(value, 1):
            pair = request(f"{key} request {n}", item) if isinstance(item, dict) else item
            if (not isinstance(pair, (list, tuple)) or len(pair) not in (2, 3)
                    or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                               for v in pair)):  # fmt: skip
                raise ConfigError(f"{key} request {n}: expected [batch_size, seq_len] (and "
                                  "new_tokens), whole numbers of at least 1, got "
                                  f"{item!r}")  # fmt: skip
            shapes.append(tuple(pair))
        return tuple(shapes)
    raise ConfigError(f"{key} = {value!r}: expected a traffic file's path")


def distinct(requests: tuple[Shape, ...]) -> list[tuple[Shape, int]]:
    """Each distinct shape and how many requests hold it, most frequent first (ties: in the
    order of their first arrival)."""
    counts = Counter(requests)
    first = {shape: i for i, shape in reversed(list(enumerate(requests)))}
    return sorted(counts.items(), key=lambda item: (-item[1], first[item[0]]))


def steady(requests: tuple[Shape, ...], eager: set[Shape] | frozenset[Shape] = frozenset(),
           most: int = STEADY_SHAPES) -> dict[Shape, float]:  # fmt: skip
    """The shapes the steady state times, with weights summing to 1: every distinct shape at
    its share of the requests, or, past ``most`` of them (:data:`STEADY_SHAPES` unless a time
    budget asks for fewer), shapes at evenly spaced quantiles by size that keep the traffic's
    mix: the requests whose shape ran ``eager`` in the first pass (past a recompile limit, or
    by a stance) get their share of the slots, and each group's picks stand for that group's
    share of the requests."""
    found = distinct(requests)
    if len(found) <= most:
        return {shape: n / len(requests) for shape, n in found}
    groups = [[r for r in requests if r in eager], [r for r in requests if r not in eager]]
    groups = [g for g in groups if g]
    slots = [max(1, round(most * len(g) / len(requests))) for g in groups]
    if sum(slots) > most:  # two groups rounded up: the larger gives one back
        slots[slots.index(max(slots))] -= 1
    weights: dict[Shape, float] = {}
    for group, n in zip(groups, slots, strict=True):
        ordered = sorted(group, key=lambda s: (s[0] * s[1], s))
        for i in range(n):
            shape = ordered[int((i + 0.5) * len(ordered) / n)]
            weights[shape] = weights.get(shape, 0.0) + len(group) / len(requests) / n
    return weights


def first_arrivals(requests: tuple[Shape, ...]) -> list[Shape]:
    """The distinct shapes in the order of their first arrival."""
    return list(dict.fromkeys(requests))


def extremes(requests: tuple[Shape, ...]) -> list[Shape]:
    """The smallest and the largest shape by size."""
    by_size = sorted(set(requests), key=lambda s: (s[0] * s[1], s))
    return list(dict.fromkeys([by_size[0], by_size[-1]]))


def reference_shapes(requests: tuple[Shape, ...]) -> list[Shape]:
    """The shapes the study's reference covers: those whose first arrival may compile a graph
    under some strategy of the space (the first :data:`STATIC_COMPILES` distinct arrivals, as a
    static compile meets them; the first arrival in each power-of-two and each quantile
    bucket), the extremes and the most frequent, at most :data:`REFERENCE_SHAPES`. A trial
    judges every shape that compiled among them (:mod:`autotune.trial.scenarios.traffic_trial`)."""
    arrivals = first_arrivals(requests)
    found = edges(requests)
    by_bucket: dict[tuple[str, Shape], Shape] = {}
    for b, s in arrivals:
        by_bucket.setdefault(("pow2", (bucket(b), bucket(s))), (b, s))
        quantile = (up_to(b, found[0]), up_to(s, found[1]))
        by_bucket.setdefault(("quantiles", quantile), (b, s))
    picks = [*arrivals[: STATIC_COMPILES + 1], *extremes(requests), distinct(requests)[0][0],
             *by_bucket.values()]  # fmt: skip
    return list(dict.fromkeys(picks))[:REFERENCE_SHAPES]


def bucket(n: int) -> int:
    """The power of two at or above ``n`` (a ``pow2`` padding bucket)."""
    return 1 << max(0, n - 1).bit_length()


def edges(requests: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Quantile buckets' edges in batch and sequence: the traffic's quartiles (nearest rank),
    the largest size last."""

    def quartiles(values: list[int]) -> tuple[int, ...]:
        ordered = sorted(values)
        ranks = [max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.5) - 1)) for q in QUANTILES]
        return tuple(sorted({ordered[r] for r in ranks}))

    return quartiles([b for b, _ in requests]), quartiles([s for _, s in requests])


def up_to(n: int, found: tuple[int, ...]) -> int:
    """The smallest edge at or above ``n`` (past the largest: the power of two above ``n``,
    so that a request longer than any measured still meets a bucket)."""
    return next((e for e in found if e >= n), bucket(n))


def describe(requests: list[Any] | tuple[Any, ...]) -> str:
    """A traffic in a few words: requests, distinct shapes, the ranges."""
    shapes = [tuple(r) for r in requests]
    batches, seqs = [s[0] for s in shapes], [s[1] for s in shapes]
    span = lambda v: f"{min(v)}" if min(v) == max(v) else f"{min(v)}..{max(v)}"  # noqa: E731
    return (f"{len(shapes)} requests, {len(set(shapes))} shapes (batch {span(batches)}, "
            f"seq {span(seqs)})")  # fmt: skip
