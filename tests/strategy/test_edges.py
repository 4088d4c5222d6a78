"""``--buckets auto``'s edges: the exact partition against brute force, and what it gives at
the extremes of a compile's price."""

from __future__ import annotations

import importlib
import itertools
import random

import pytest


def edges_module():
    return importlib.import_module("autotune.strategy.edges")


def brute_force(sizes, group_cost, most):
    """Every choice of edges (the largest always one), priced group by group."""
    n, best = len(sizes), (float("inf"), ())
    for k in range(1, min(most, n) + 1):
        for cut in itertools.combinations(range(1, n), k - 1):
            ends = [*cut, n]
            total, start = 0.0, 0
            for end in ends:
                total += group_cost(start, end)
                start = end
            if total < best[0] - 1e-12:
                best = (total, tuple(sizes[e - 1] for e in ends))
    return best


def test_the_partition_is_optimal_against_brute_force_on_small_cases() -> None:
    edges = edges_module()
    rng = random.Random(7)
    for _ in range(60):
        sizes = sorted(rng.sample(range(1, 300), rng.randint(1, 8)))
        weights = {s: rng.randint(1, 20) for s in sizes}
        stall, per = rng.uniform(0, 50), rng.uniform(0.01, 2)

        def group_cost(j, i, sizes=sizes, weights=weights, stall=stall, per=per):
            return stall + per * sizes[i - 1] * sum(weights[s] for s in sizes[j:i])

        most = rng.randint(1, 5)
        found, total = edges.partition(sizes, group_cost, most)
        expected, _ = brute_force(sizes, group_cost, most)
        assert total == pytest.approx(expected)
        assert len(found) <= most and found[-1] == sizes[-1]
        # the edges it returns cost what it says
        ends = [sizes.index(e) + 1 for e in found]
        priced, start = 0.0, 0
        for end in ends:
            priced += group_cost(start, end)
            start = end
        assert priced == pytest.approx(total)


def requests(seed: int = 0, n: int = 200):
    rng = random.Random(seed)
    return [(1, int(2 ** rng.uniform(4, 9))) for _ in range(n)]


def test_the_largest_size_is_always_an_edge_and_every_request_falls_in_a_bucket() -> None:
    edges = edges_module()
    model = edges.LatencyModel(1.0, 0.01)
    for stall in (0.0, 1.0, 1e6):
        traffic = requests(3)
        batch, seq = edges.choose(traffic, stall, model, calls=10_000)
        assert seq[-1] == max(s for _, s in traffic) and batch == (1,)
        assert all(any(s <= e for e in seq) for _, s in traffic)


def test_a_traffic_of_one_size_gets_one_bucket() -> None:
    edges = edges_module()
    assert edges.choose([(2, 64)] * 30, 0.0, edges.LatencyModel(0.5, 0.01), 1e6) == ((2,), (64,))


def test_a_free_compile_gets_a_bucket_per_size_up_to_the_limit_a_dear_one_few() -> None:
    edges = edges_module()
    model = edges.LatencyModel(0.2, 0.01)
    few = [(1, s) for s in (16, 40, 90, 200, 16, 40, 300)]
    assert edges.choose(few, 0.0, model, 1e5)[1] == (16, 40, 90, 200, 300)
    many = requests(5)
    distinct = len({s for _, s in many})
    _, free = edges.choose(many, 0.0, model, 1e5, most=8)
    assert distinct > 8 and len(free) == 8
    _, dear = edges.choose(many, 3600.0, model, 1e5, most=8)
    assert dear == (max(s for _, s in many),)  # an hour a compile: one bucket
    _, middling = edges.choose(many, 30.0, model, 1e5, most=8)
    assert 1 < len(middling) < 8


def test_auto_costs_no_more_than_pow2_or_quantiles_by_its_own_measure() -> None:
    edges = edges_module()
    from autotune import traffic as t

    model, traffic = edges.LatencyModel(0.3, 0.02), requests(11)
    batch, seq = edges.choose(traffic, 5.0, model, 20_000)
    auto = edges.cost(traffic, lambda r: (t.up_to(r[0], batch), t.up_to(r[1], seq)), 5.0,
                      model, 20_000)  # fmt: skip
    pow2 = edges.cost(traffic, lambda r: (t.bucket(r[0]), t.bucket(r[1])), 5.0, model, 20_000)
    found = t.edges(traffic)
    quant = edges.cost(traffic, lambda r: (t.up_to(r[0], found[0]), t.up_to(r[1], found[1])),
                       5.0, model, 20_000)  # fmt: skip
    assert auto["total_s"] <= pow2["total_s"] and auto["total_s"] <= quant["total_s"]
    assert 0 <= auto["padded_share"] < 1


def test_a_latency_model_fits_a_line_and_never_goes_negative() -> None:
    edges = edges_module()
    line = edges.LatencyModel.fit([((1, 10), 2.0), ((1, 20), 3.0), ((2, 20), 5.0)])
    assert line.base_ms == pytest.approx(1.0) and line.per_token_ms == pytest.approx(0.1)
    one = edges.LatencyModel.fit([((1, 50), 5.0)])
    assert one.ms(1, 100) == pytest.approx(10.0)
    falling = edges.LatencyModel.fit([((1, 10), 5.0), ((1, 20), 1.0)])
    assert falling.per_token_ms >= 0 and falling.base_ms >= 0
    with pytest.raises(ValueError):
        edges.LatencyModel.fit([])


def test_auto_k_is_read_and_a_bad_k_refused() -> None:
    edges = edges_module()
    assert edges.parse("auto") == edges.MOST and edges.parse("auto:3") == 3
    assert edges.parse("pow2") is None
    for bad in ("auto:0", "auto:x", "auto:65"):
        with pytest.raises(ValueError, match="auto:K"):
            edges.parse(bad)
