"""An arrival traffic served through transformers' continuous batching with the user's own calls
(autotune/trial/scenarios/replay.py), checked against loops we would write ourselves over
transformers' public API: ``generate_batch``, and ``init_continuous_batching`` with
``add_request`` at each arrival."""

from __future__ import annotations

import random
import time

import pytest
import torch

from autotune.strategy import Strategy, batching
from autotune.trial import metrics
from autotune.trial.scenarios import replay
from tests import models

N = 8


def _traffic(seed: int = 0) -> tuple[list[list[int]], list[int], list[float]]:
    rng, t, arrivals = random.Random(seed), 0.0, []
    for _ in range(N):
        t += rng.expovariate(40.0)
        arrivals.append(t)
    prompts = [[rng.randrange(100) for _ in range(rng.randint(4, 40))] for _ in range(N)]
    return prompts, [rng.randint(2, 10) for _ in range(N)], arrivals


def _kwargs(s: Strategy, prompts: list[list[int]], answers: list[int]) -> dict:
    compiled = batching.compile_config(s) if s.granularity != "none" else None
    blocks = batching.blocks([len(p) for p in prompts], answers, s.batching)
    return {**batching.config_kwargs(s.batching, compiled), "num_blocks": blocks}


def test_a_replay_serves_generate_batch_s_tokens_at_each_arrival() -> None:
    torch.manual_seed(0)
    model, _ = models.tiny_llama()
    prompts, answers, arrivals = _traffic()
    kwargs = _kwargs(Strategy.create(granularity="none"), prompts, answers)
    made, ready = replay.manager(model, kwargs, answers)
    try:
        got = replay.serve(made, prompts, answers, arrivals)
        closed = replay.serve(made, prompts, answers, [], concurrency=2, tag="c")
    finally:
        made.stop(block=True)
    # a user's own call, one answer length at a time (generate_batch takes one max_new_tokens)
    for n in sorted(set(answers)):
        which = [i for i, a in enumerate(answers) if a == n]
        out = model.generate_batch([prompts[i] for i in which], max_new_tokens=n,
                                   continuous_batching_config=batching.config_object(kwargs),
                                   do_sample=False)  # fmt: skip
        theirs = [list(r.generated_tokens) for r in out.values()]
        assert [got.requests[i].tokens for i in which] == theirs
        assert [closed.requests[i].tokens for i in which] == theirs
    assert [len(r.tokens) for r in got.requests] == answers
    for r, at in zip(got.requests, arrivals, strict=True):
        assert r.arrival_s == pytest.approx(at, abs=0.05)  # sent at its arrival
        assert 0 < r.ttft_ms <= r.total_ms
    # the closed loop: never more than two requests in the server at once
    spans = [(r.arrival_s, r.arrival_s + r.total_ms / 1e3) for r in closed.requests]
    for start, _ in spans:
        assert sum(a <= start < b for a, b in spans) <= 2
    assert got.goodput(None, None) == pytest.approx(N / got.span_s)
    assert got.goodput(0.0, None) == 0.0  # no request meets a TTFT of 0 ms
    assert ready < 60


@pytest.mark.slow
def test_a_replay_s_compiles_after_warm_up_are_a_plain_loop_s() -> None:
    """The graphs a replay's stalls compile after the warm-up (Dynamo's compiles, as its
    callbacks see them, each a stall; some compile no graph) are those a plain loop over
    ``init_continuous_batching`` meets at the same arrivals, by Dynamo's own counter; its
    tokens are the plain loop's."""
    prompts, answers, arrivals = _traffic(1)
    s = Strategy.create(backend="eager", batching="q=32,kv=512")
    counts, tokens = {}, {}
    for who in ("replay", "plain"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model, _ = models.tiny_llama()
        kwargs = _kwargs(s, prompts, answers)
        if who == "replay":
            made, _ = replay.manager(model, kwargs, answers)
            before = metrics.compile_counts()[0]
            stalls: list[int] = []
            with metrics.around_compiles(lambda: None, lambda s=stalls: s.append(1)):
                served = replay.serve(made, prompts, answers, arrivals)
            made.stop(block=True)
            counts[who] = (len(stalls), metrics.compile_counts()[0] - before)
            tokens[who] = [r.tokens for r in served.requests]
            continue
        with torch.inference_mode():
            manager = model.init_continuous_batching(
                continuous_batching_config=batching.config_object(kwargs)
            )
            manager.warmup()
            manager.start()
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        start, ids = time.perf_counter(), []
        for prompt, n, at in zip(prompts, answers, arrivals, strict=True):
            time.sleep(max(0.0, start + at - time.perf_counter()))
            ids.append(manager.add_request(prompt, max_new_tokens=n))
        results = {}
        while len(results) < N:
            r = manager.get_result(timeout=120)
            assert r is not None
            results[r.request_id] = list(r.generated_tokens)
        manager.stop(block=True)
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"] - before
        counts[who] = (graphs, graphs)
        tokens[who] = [results[i] for i in ids]
    assert tokens["replay"] == tokens["plain"]
    assert counts["replay"][0] >= counts["replay"][1]  # a compile may make no graph
    assert counts["replay"][1] == counts["plain"][1] > 0  # graphs the warm-up left
