"""The batches of a continuous-batching manager that ran eager past the recompile limit, and
their requests (autotune/trial/scenarios/eager_batches.py): the watch on the manager's own
thread, against a forward hook's count, and a trial on both sides of the limit."""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
from typing import Any

import pytest

from autotune.catalog import ModelRef
from autotune.cli.traffic_lines import traffic_lines
from autotune.strategy import Strategy, batching
from autotune.trial.parent import measure
from autotune.trial.scenarios import replay
from autotune.workload import Settings, Workload

LLAMA = ModelRef("tests.models:tiny_llama")


def watched() -> Any:
    """The module under test (added by this change: found as each test runs)."""
    return importlib.import_module("autotune.trial.scenarios.eager_batches")


def test_the_watch_sees_each_batch_and_its_requests_on_the_manager_s_thread() -> None:
    """An eager manager runs every forward as Python: naming its attention's forward as past
    the limit makes every batch eager, as many as a plain forward hook counts, holding every
    request; naming nothing, none; eager's batch shapes, hooked untimed, one a batch. Once
    stopped, the thread is watched no more, and no thread started after the manager's ever
    was."""
    from tests.models import tiny_llama

    model, _ = tiny_llama()
    prompts = [[3 + i + j for j in range(n)] for i, n in enumerate((5, 9, 14, 20, 7, 11))]
    answers = [3, 2, 4, 3, 2, 3]
    arrivals = [0.02 * i for i in range(len(prompts))]
    forwards: list[int] = []
    hook = model.register_forward_hook(lambda *_: forwards.append(1))
    watch = watched().Watch(model)
    made, _ = replay.manager(model, {**batching.eager_kwargs("q=1+kv=16"), "num_blocks": 32},
                             answers, watch)  # fmt: skip
    try:
        with watch.serving(), replay.batches(model, timed=False) as shapes:
            replay.serve(made, prompts, answers, arrivals, tag="a-")
        steps = len(watch.steps)
        assert len(shapes) == steps and all(s == 0.0 for _, _, s in shapes)  # untimed
        assert sum(q for q, _, _ in shapes) >= sum(map(len, prompts))  # every prompt token
        attention = type(model.model.layers[0].self_attn).forward
        hits = [{"function": watched().spelled(inspect.unwrap(attention).__code__)}]
        count, ids = watch.served_eager(hits)
        assert count == steps == len(forwards) > 0
        assert ids == {f"a-r{i}" for i in range(len(prompts))}
        assert watch.served_eager([]) == (0, set())
        step = [{"function": "forward (elsewhere.py:1)"}]  # past the limit: no model forward
        assert watch.served_eager(step) == (0, set())
        assert watch.unwatched(step + hits) == ["forward (elsewhere.py:1)"]
        assert watch.unwatched(hits) == []
        with replay.batches(model) as timed:
            replay.serve(made, prompts, answers, arrivals, tag="b-")
        assert len(watch.steps) == steps and len(forwards) > steps  # stopped: unwatched
        assert timed and all(s > 0.0 for _, _, s in timed)  # a pilot's: each forward timed
        seen: list[Any] = []
        later = threading.Thread(target=lambda: seen.append(sys.getprofile()))
        later.start(), later.join()
        assert seen == [None] and watch.thread is not None  # the manager's thread, only
    finally:
        hook.remove()
        made.stop(block=True, timeout=30)


QUICK = Settings(iters=2, warmup=1, starts=("cold",), timeout_s=300)
TRAFFIC = {"kind": "continuous", "rate": 40.0, "seq_len": "4..60", "new_tokens": "2..4",
           "requests": 12}  # fmt: skip


@pytest.mark.slow
def test_a_trial_past_the_recompile_limit_names_the_requests_served_eager() -> None:
    """Every batch its own shape (intervals of one query token, 16 cache tokens) and each
    shape a graph of its own (``dynamic=False``): Dynamo's limit of 8 is hit during the first
    pass, and the batches after it ran eager, serving some of the traffic's requests; one
    padding that gives every batch the warm-up's shape compiles nothing more and runs no
    batch eager."""
    w = Workload(**TRAFFIC)
    ragged = Strategy.create(backend="eager", dynamic="false", batching="q=1+kv=16")
    m = measure(LLAMA, w, ragged, QUICK)
    assert m.ok, m.reason
    c = m.traffic["continuous"]
    assert m.graphs.limit_hit and "recompile limit (8) hit" in m.graphs.limit_hit
    assert "blocks ran eager" not in m.graphs.limit_hit  # no probe from the wrong thread
    assert c["eager_batches"] >= 1
    assert c["ran_eager"] and set(c["ran_eager"]) <= set(range(1, len(w.traffic) + 1))
    assert m.accuracy.passed, m.accuracy.detail
    said = [x for x in traffic_lines(m) if "past the recompile limit" in x]
    assert len(said) == 1 and f"serving {len(c['ran_eager'])} of 12 requests" in said[0]
    padded = Strategy.create(backend="eager", dynamic="false",
                             batching="q=64+kv=16384+tokens=64")  # fmt: skip
    p = measure(LLAMA, w, padded, QUICK)
    assert p.ok, p.reason
    assert not p.graphs.limit_hit and p.traffic["continuous"]["stalls_s"] == []
    assert p.traffic["continuous"]["eager_batches"] == 0
    assert p.traffic["continuous"]["ran_eager"] == []
    assert not [x for x in traffic_lines(p) if "past the recompile limit" in x]
