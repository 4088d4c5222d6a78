"""pad=auto's choice of padding intervals (autotune/strategy/intervals.py): eager's batches kept
as a histogram, a step model fitted to them, and the intervals of least lifetime cost, from both
sides: a dear compile buys few padded shapes, a cheap one no padding."""

from __future__ import annotations

import pytest

from autotune.strategy import intervals
from autotune.strategy.batching import Limits

# a traffic's batches: two prefills of 40 and 24 tokens, then decode steps of 1 and 2 tokens
STEPS = [(40, 0, 0.0041), (24, 40, 0.0030), *[(2, 64 + i, 0.0012) for i in range(12)],
         *[(1, 80 + i, 0.0011) for i in range(20)]]  # fmt: skip
WIDE = Limits(1, 16, 8192, 4096)  # the limits a strategy's candidates are chosen within


def test_the_histogram_keeps_each_batch_once_by_query_and_read_to_its_grain() -> None:
    rows = intervals.histogram(STEPS)
    assert sum(n for _, _, n, _ in rows) == len(STEPS)
    assert sum(s for *_, s in rows) == pytest.approx(sum(s for *_, s in STEPS))
    assert (2, 64, 1, pytest.approx(0.0012)) in rows  # a read of 64 is its own grain
    assert (2, 80, 12 - 1, pytest.approx(0.0012 * 11)) in rows  # 65..75 go up to 80
    assert all(p % intervals.GRAIN == 0 for _, p, _, _ in rows)


def test_the_step_model_finds_the_costs_behind_the_batches() -> None:
    truth = intervals.StepModel(0.001, 2e-5, 1e-7)
    steps = [(q, p, truth.seconds(q, p)) for q in (1, 2, 8, 30, 64) for p in (0, 32, 160, 480)]
    fitted = intervals.StepModel.fit(intervals.histogram(steps))
    assert fitted.base == pytest.approx(truth.base, rel=1e-6)
    assert fitted.per_token == pytest.approx(truth.per_token, rel=1e-6)
    assert fitted.per_pair == pytest.approx(truth.per_pair, rel=1e-6)
    # time that falls as batches grow has no negative price: that term is dropped
    falling = intervals.StepModel.fit([(1, 0, 1, 0.003), (50, 0, 1, 0.002), (90, 0, 1, 0.001)])
    assert min(falling.base, falling.per_token, falling.per_pair) >= 0


def test_the_candidates_come_from_the_batches_and_transformers_presets() -> None:
    rows = intervals.histogram(STEPS)
    queries, reads = intervals.candidates(rows, most_q=8192, most_kv=4096)
    assert {1, 2, 4, 8, 16, 32, 64, 40}.issubset(queries) and max(queries) == 64
    assert {16, 32, 64, 128}.issubset(reads) and 16384 not in reads  # above the cache
    assert reads == sorted(reads) and all(r % 16 == 0 for r in reads)


def _priced(stall_s: float) -> dict[str, float]:
    rows = intervals.histogram(STEPS)
    model = intervals.StepModel.fit(rows)
    work = model.work(rows, Limits(64, 128, 8192, 4096))  # the pilot's padding
    return {"ready_s": 5.0, "stall_s": stall_s, "request_ms": 10.0, "work_s": work,
            "eager_ms": 12.0, "real_s": model.work(rows), "steps": 8.0,
            "requests": 1000.0}  # fmt: skip


def test_a_dear_compile_buys_few_padded_shapes_a_cheap_one_none() -> None:
    rows = intervals.histogram(STEPS)
    model = intervals.StepModel.fit(rows)
    (q, kv), dear = intervals.choose(rows, WIDE, model, _priced(stall_s=60.0))
    assert dear["graphs"] == 1 and q >= 40  # one shape holds every batch
    (q, kv), cheap = intervals.choose(rows, WIDE, model, _priced(stall_s=0.0))
    assert (q, kv) == (1, 16) and cheap["graphs"] > 1  # the least padding, shapes are free
    assert cheap["total_s"] <= intervals.cost(rows, Limits(64, 128, 8192, 4096), model,
                                              _priced(0.0))["total_s"]  # fmt: skip


def test_the_cost_counts_the_ready_the_stalls_and_the_lifetime_s_requests() -> None:
    rows = intervals.histogram(STEPS)
    model = intervals.StepModel.fit(rows)
    priced = _priced(stall_s=2.0)
    same = intervals.cost(rows, Limits(64, 128, 8192, 4096), model, priced)  # the pilot's own
    assert same["request_ms"] == pytest.approx(priced["request_ms"])
    assert same["total_s"] == pytest.approx(5.0 + same["graphs"] * 2.0
                                            + 1000 * priced["request_ms"] / 1e3)  # fmt: skip
    unpadded = intervals.cost(rows, Limits(1, 16, 8192, 4096), model, priced)
    # eager at the pilot's padding: its 12 ms, and 8 steps a request of the padded work added
    at_pilot = 12.0 + 8 * (same["work_s"] - priced["real_s"]) / len(STEPS) * 1e3
    at_none = 12.0 + 8 * (unpadded["work_s"] - priced["real_s"]) / len(STEPS) * 1e3
    assert unpadded["request_ms"] == pytest.approx(10.0 * at_none / at_pilot)
    assert 0 < unpadded["request_ms"] < same["request_ms"]  # less padding, less time
