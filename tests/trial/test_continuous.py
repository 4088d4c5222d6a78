"""The continuous workload's trial (autotune/trial/scenarios/continuous.py), in its own fresh
process: a strategy's warm-up timed, the compiles after it counted as stalls, every request's
tokens judged against eager's, both sides of that gate."""

from __future__ import annotations

import pytest

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.parent import measure
from autotune.workload import Settings, Workload

LLAMA = ModelRef("tests.models:tiny_llama")
QUICK = Settings(iters=4, warmup=1, starts=("cold",), timeout_s=300)
POISSON = {"kind": "continuous", "rate": 40.0, "seq_len": "4..40", "new_tokens": "2..8",
           "requests": 8}  # fmt: skip


@pytest.mark.slow
def test_a_continuous_trial_counts_the_stalls_its_warm_up_left() -> None:
    w = Workload(**POISSON)
    m = measure(LLAMA, w, Strategy.create(backend="eager", batching="q=32+kv=512"), QUICK)
    assert m.ok, m.reason
    c = m.traffic["continuous"]
    # the warm-up compiles the largest batch only: the traffic's first batches compile more
    assert len(c["stalls_s"]) > 0
    assert m.compile_s == pytest.approx(c["ready_s"] + sum(c["stalls_s"]))
    assert m.accuracy.passed, m.accuracy.detail
    assert c["config"]["q_padding_interval_size"] == 32
    assert c["padding"]["batches"] >= 2 and c["padding"]["q_waste"] >= 0  # eager's batches
    assert len(c["requests"]["compiled"]) == len(w.traffic) == 8
    assert [len(r["tokens"]) for r in c["requests"]["compiled"]] == list(w.answers)
    assert m.latency.median_ms > 0 and m.ttft.median_ms > 0 and m.tokens_per_s > 0
    eager = measure(LLAMA, w, Strategy.create("none"), QUICK)
    assert eager.ok and eager.traffic["continuous"]["stalls_s"] == []
    assert eager.traffic["continuous"]["padding"] == {}  # eager pads nothing
    assert eager.compile_s == 0


@pytest.mark.slow
def test_a_backend_that_changes_the_tokens_fails_the_gate() -> None:
    wrong = Strategy.create(backend="tests.models:negating_backend", batching="q=32+kv=512")
    m = measure(LLAMA, Workload(**POISSON), wrong, QUICK)
    assert m.ok, m.reason
    assert not m.accuracy.passed
    assert "differs from eager's" in m.accuracy.detail


@pytest.mark.slow
def test_a_sliding_window_model_is_served_and_judged_alike() -> None:
    """Gemma-2's sliding-window layers (a paged cache of each kind, no decode fast path):
    its compiled strategy's tokens are eager's over the traffic."""
    w = Workload(**{**POISSON, "requests": 6})
    s = Strategy.create(backend="eager", batching="q=32+kv=512")
    m = measure(ModelRef("tests.models:tiny_gemma2"), w, s, QUICK)
    assert m.ok, m.reason
    assert m.accuracy.passed, m.accuracy.detail
    assert [len(r["tokens"]) for r in m.traffic["continuous"]["requests"]["eager"]] == list(
        w.answers
    )
