"""Intervals: the padding intervals a continuous-batching strategy's ``pad=auto`` chooses, from
the batches eager formed over the traffic, by lifetime cost, as ``--buckets auto`` chooses
edges (:mod:`autotune.strategy.edges`).

A pilot (:mod:`autotune.trial.auto_padding`) serves the traffic with intervals fitted to it and
records eager's batches: each one's query tokens, the cache it read and its forward's seconds,
kept as a **histogram** (:func:`histogram`). A **step model** affine in the padded work (query
tokens, and query tokens times the keys they attend to) is fitted to eager's steps. For each
candidate pair of intervals (:func:`candidates`: powers of two up to the traffic's largest
batch and read, its quartiles, and transformers' presets) the cost over the lifetime is the
compiles of each distinct padded shape (up to torch's recompile limit), priced at what the
pilot's shapes cost it, plus the lifetime's requests at the pilot's time a request, scaled as
eager's time a request moves with the padded work. :func:`choose` takes the pair of least
cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from autotune.strategy.batching import PRESET_KV, PRESET_Q, Limits
from autotune.traffic import STATIC_COMPILES, bucket

GRAIN = 16  # a histogram keeps a batch's cache read to this grain; kv candidates are multiples
Row = tuple[int, int, int, float]  # query tokens, cache read (to GRAIN), batches, seconds


def histogram(steps: list[tuple[int, int, float]]) -> list[Row]:
    """Eager's batches (query tokens, cache read, seconds) as rows of the same query tokens
    and the same read to :data:`GRAIN` tokens, each with its batches and their seconds: what a
    trial's record keeps, however long the traffic."""
    rows: dict[tuple[int, int], list[float]] = {}
    for q, past, seconds in steps:
        row = rows.setdefault((q, -(-past // GRAIN) * GRAIN), [0, 0.0])
        row[0] += 1
        row[1] += seconds
    return [(q, past, int(n), round(s, 9)) for (q, past), (n, s) in sorted(rows.items())]


@dataclass(frozen=True)
class StepModel:
    """A batch's seconds as ``base + per_token x q + per_pair x q x (q + read)``."""

    base: float
    per_token: float
    per_pair: float

    @classmethod
    def fit(cls, rows: list[Row]) -> StepModel:
        """Least squares over the rows' mean seconds, weighted by their batches; a term whose
        weight comes out negative is dropped and the rest fitted again."""
        import numpy as np

        x = np.array([[1.0, q, q * (q + past)] for q, past, _, _ in rows])
        y = np.array([s / n for _, _, n, s in rows])
        w = np.sqrt(np.array([float(n) for _, _, n, _ in rows]))
        keep = [0, 1, 2]
        while True:
            coef = np.zeros(3)
            found, *_ = np.linalg.lstsq(x[:, keep] * w[:, None], y * w, rcond=None)
            coef[keep] = found
            if (coef >= 0).all() or len(keep) == 1:
                return cls(*(max(0.0, float(c)) for c in coef))
            keep.remove(next(k for k in reversed(keep) if coef[k] < 0))

    def seconds(self, q: int, read: int) -> float:
        return self.base + self.per_token * q + self.per_pair * q * (q + read)

    def work(self, rows: list[Row], limits: Limits | None = None) -> float:
        """Seconds of one pass of the rows' batches, each padded as ``limits`` pad it (None:
        as they are)."""
        return sum(n * self.seconds(*(limits.padded(q, past) if limits else (q, past)))
                   for q, past, n, _ in rows)  # fmt: skip

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def shapes(rows: list[Row], limits: Limits) -> int:
    """The distinct padded shapes of the rows' batches."""
    return len({limits.padded(q, past) for q, past, _, _ in rows})


def candidates(rows: list[Row], most_q: int, most_kv: int) -> tuple[list[int], list[int]]:
    """Query and KV intervals to price: powers of two up to the largest batch (read), each
    quartile of the batches' sizes (reads, to :data:`GRAIN`), and transformers' presets; none
    above its limit."""

    def spread(values: list[int], low: int, most: int, preset: int) -> list[int]:
        top = bucket(max(max(values), low))
        found = {1 << k for k in range(low.bit_length() - 1, top.bit_length())}
        ordered = sorted(values)
        found |= {ordered[min(len(ordered) - 1, int(p * len(ordered)))] for p in (0.25, 0.5, 0.75)}
        found |= {max(values), preset}
        return sorted(v for v in found if low <= v <= most)

    queries = [q for q, _, n, _ in rows for _ in range(n)]
    reads = [max(GRAIN, past) for _, past, n, _ in rows for _ in range(n)]
    return spread(queries, 1, most_q, PRESET_Q), spread(reads, GRAIN, most_kv, PRESET_KV)


def cost(rows: list[Row], limits: Limits, model: StepModel, priced: dict[str, float]) -> dict[
        str, float]:  # fmt: skip
    """A pair of intervals' cost over the lifetime, from what a pilot ``priced``: its time to
    ready (``ready_s``), ``stall_s`` a padded shape's compiles, its time a request
    (``request_ms``) at its own padded work a pass (``work_s``), eager's (``eager_ms``) at the
    batches' real work (``real_s``), the ``steps`` a request lives through, and the lifetime's
    ``requests``. Eager's time a request at a padding is its own plus the padded work's
    change a batch at each step; the strategy's, the pilot's scaled as eager's is from the
    pilot's padding to this one (the compiled step as fast, against eager's, at any padding)."""
    graphs = min(shapes(rows, limits), STATIC_COMPILES)
    work = model.work(rows, limits)
    per_batch_ms = 1e3 / sum(n for _, _, n, _ in rows)

    def eager_ms(padded_s: float) -> float:
        return priced["eager_ms"] + priced["steps"] * (padded_s - priced["real_s"]) * per_batch_ms

    request_ms = priced["request_ms"] * eager_ms(work) / eager_ms(priced["work_s"])
    serving_s = priced["requests"] * request_ms / 1e3
    stalls_s = graphs * priced["stall_s"]
    return {"graphs": float(graphs), "work_s": work, "request_ms": request_ms,
            "stalls_s": stalls_s, "serving_s": serving_s,
            "total_s": priced.get("ready_s", 0.0) + stalls_s + serving_s}  # fmt: skip


def choose(rows: list[Row], base: Limits, model: StepModel,
           priced: dict[str, float]) -> tuple[tuple[int, int], dict[str, float]]:  # fmt: skip
    """The intervals ``(q, kv)`` of least lifetime cost within ``base``'s limits (fewer
    graphs, then larger intervals, on a tie), and that cost."""
    found = []
    queries, reads = candidates(rows, base.most_q, base.most_kv)
    for q in queries:
        for kv in reads:
            priced_pair = cost(rows, Limits(q, kv, base.most_q, base.most_kv), model, priced)
            found.append(((priced_pair["total_s"], priced_pair["graphs"], -q, -kv),
                          (q, kv), priced_pair))  # fmt: skip
    _, pair, best = min(found)
    return pair, best
