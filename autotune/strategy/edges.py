"""Bucket edges chosen for a traffic (``--buckets auto``): the edges that cost a deployment
least over its lifetime.

A deployment that pads to buckets pays each bucket's compile once (a stall) and each call at
the latency of its padded shape. Given what one bucket's compile costs (``stall_s``), a
latency model of padded shapes (:class:`LatencyModel`) and the calls a lifetime serves
(``calls``), the cost of a set of edges is

    stall_s x (buckets the traffic hits) + calls x sum over requests of share x latency(padded)

and :func:`partition` finds the edges of least cost exactly, in one dimension: the optimal
partition of the sorted distinct sizes into at most K contiguous groups, each padded to its
largest size, by dynamic programming in O(n^2 K). The largest size is always an edge, so
every request falls in a bucket. A traffic of two dimensions gets its batch edges first (each
request's sequence at its own length), then its sequence edges given them (:func:`choose`):
exact in each dimension, one after the other. :func:`cost` prices any edges the same way, so
``pow2`` and ``quantiles`` can stand beside ``auto``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from autotune.traffic import up_to

Shape = tuple[int, int]
Edges = tuple[tuple[int, ...], tuple[int, ...]]  # (batch edges, sequence edges), ascending
MOST = 8  # buckets per dimension unless ``auto:K`` says: torch's default recompile limit


@dataclass(frozen=True)
class LatencyModel:
    """A padded call's latency, affine in its tokens: ``ms = base_ms + per_token_ms x batch x
    seq``, fitted by least squares to measured (shape, ms) points, neither part negative."""

    base_ms: float
    per_token_ms: float

    def ms(self, batch: int, seq: int) -> float:
        return self.base_ms + self.per_token_ms * batch * seq

    @classmethod
    def fit(cls, points: Sequence[tuple[Shape, float]]) -> LatencyModel:
        """The least-squares line through ``points``; through the origin where they hold one
        size; a ``ValueError`` for none."""
        if not points:
            raise ValueError("no measured shapes to fit a latency model to")
        xs = [float(b * s) for (b, s), _ in points]
        ys = [float(ms) for _, ms in points]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        spread = sum((x - mx) ** 2 for x in xs)
        if spread == 0:
            return cls(0.0, my / mx)
        slope = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / spread)
        base = my - slope * mx
        if base < 0:  # a line through the origin instead
            through = sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
            return cls(0.0, through)
        return cls(base, slope)

    def to_dict(self) -> dict[str, float]:
        return {"base_ms": self.base_ms, "per_token_ms": self.per_token_ms}


def partition(sizes: Sequence[int], group_cost: Callable[[int, int], float],
              most: int) -> tuple[tuple[int, ...], float]:  # fmt: skip
    """The edges of least cost over ``sizes`` (ascending, distinct) in at most ``most``
    groups, and that cost: ``group_cost(j, i)`` prices the group of ``sizes[j:i]`` padded to
    ``sizes[i - 1]``. Exact: dynamic programming over the groups' ends."""
    n = len(sizes)
    if n == 0:
        return (), 0.0
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(most + 1)]  # best[k][i]: sizes[:i] in k groups
    back = [[0] * (n + 1) for _ in range(most + 1)]
    best[0][0] = 0.0
    for k in range(1, most + 1):
        for i in range(1, n + 1):
            for j in range(k - 1, i):
                if best[k - 1][j] == inf:
                    continue
                c = best[k - 1][j] + group_cost(j, i)
                if c < best[k][i]:
                    best[k][i], back[k][i] = c, j
    k = min(range(1, most + 1), key=lambda g: (best[g][n], g))
    total, ends, i = best[k][n], [], n
    while i > 0:
        ends.append(sizes[i - 1])
        i, k = back[k][i], k - 1
    return tuple(reversed(ends)), total


def choose(requests: Sequence[Shape], stall_s: float, model: LatencyModel, calls: float,
           most: int = MOST) -> Edges:  # fmt: skip
    """The batch and sequence edges of least cost for ``requests`` (see the module's text)."""
    counts, total = Counter(requests), len(requests)
    per_call = calls / total  # each request stands for this many calls of the lifetime

    batches = sorted({b for b, _ in counts})
    tokens_at = {b: sum(n * s for (bb, s), n in counts.items() if bb == b) for b in batches}
    many_at = {b: sum(n for (bb, _), n in counts.items() if bb == b) for b in batches}

    def batch_cost(j: int, i: int) -> float:
        edge, group = batches[i - 1], batches[j:i]
        n, tokens = sum(many_at[b] for b in group), sum(tokens_at[b] for b in group)
        served_ms = model.base_ms * n + model.per_token_ms * edge * tokens
        return stall_s + per_call * served_ms / 1e3

    batch_edges, _ = partition(batches, batch_cost, most)
    seqs = sorted({s for _, s in counts})
    groups = sorted({up_to(b, batch_edges) for b, _ in counts})
    at = {g: [0] * len(seqs) for g in groups}  # requests of each sequence, by batch bucket
    index = {s: i for i, s in enumerate(seqs)}
    for (b, s), n in counts.items():
        at[up_to(b, batch_edges)][index[s]] += n
    ahead = {g: [0, *accumulate(found)] for g, found in at.items()}  # before each sequence

    def seq_cost(j: int, i: int) -> float:
        edge, stalls, served_ms = seqs[i - 1], 0, 0.0
        for g in groups:
            if n := ahead[g][i] - ahead[g][j]:
                stalls += 1
                served_ms += n * model.ms(g, edge)
        return stall_s * stalls + per_call * served_ms / 1e3

    seq_edges, _ = partition(seqs, seq_cost, most)
    return batch_edges, seq_edges


def cost(requests: Sequence[Shape], pad: Callable[[Shape], Shape], stall_s: float,
         model: LatencyModel, calls: float) -> dict[str, Any]:  # fmt: skip
    """What padding ``requests`` by ``pad`` costs over a lifetime of ``calls``: the buckets
    hit, their stalls, the calls' time at the padded shapes' modelled latency, the whole, and
    the share of the computed tokens that are padding."""
    padded = [pad(r) for r in requests]
    buckets = len(set(padded))
    mean_ms = sum(model.ms(*p) for p in padded) / len(padded)
    real, computed = sum(b * s for b, s in requests), sum(b * s for b, s in padded)
    return {"buckets": buckets, "stalls_s": stall_s * buckets, "mean_ms": mean_ms,
            "calls_s": calls * mean_ms / 1e3,
            "total_s": stall_s * buckets + calls * mean_ms / 1e3,
            "padded_share": 1 - real / computed}  # fmt: skip


def parse(value: str) -> int | None:
    """``auto`` -> :data:`MOST`; ``auto:K`` -> K (1 to 64); None for any other buckets value
    (a ``ValueError`` for a bad K)."""
    if value == "auto":
        return MOST
    if not value.startswith("auto:"):
        return None
    k = value.removeprefix("auto:")
    if not k.isdigit() or not 1 <= int(k) <= 64:
        raise ValueError(f"bad buckets {value!r}: auto:K takes K from 1 to 64")
    return int(k)
