"""Helpers the tests share (import them from here; conftest.py holds only fixtures and hooks):
a fast study spec, hand-made measurements and stored rows, a small hand-built store, and a tiny
llama's generations counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from autotune.search.spec import StudySpec
from autotune.storage import Store, Stored
from autotune.strategy import Strategy
from autotune.trial.measurement import Accuracy, Latency, Measurement, Memory
from autotune.workload import Workload

FAST = {
    "model": "toy-64", "layers": 4, "device": "cpu", "iters": 3, "warmup": 1, "timeout": 120,
}  # fmt: skip


def fast_spec(**over: object) -> StudySpec:
    """A toy-64 study over fast backends only (no inductor), quick enough for CI."""
    flags = {**FAST, "backend": "eager,aot_eager", **over}
    return StudySpec.from_sources(None, **flags)


def point(strategy: Strategy, compile_s: float, ms: float, eager_ms: float = 10.0,
          ok: bool = True) -> dict:  # fmt: skip
    return Measurement(
        strategy.to_dict(), {"name": "toy-64"}, Workload().to_dict(), "ok",
        compile_s=compile_s, latency=Latency.from_samples([ms / 1e3] * 8),
        eager_latency=Latency.from_samples([eager_ms / 1e3] * 8), speedup=eager_ms / ms,
        accuracy=Accuracy(0.0 if ok else 1.0, 0.0, ok, 1e-5, 1e-3),
        memory=Memory("cpu-rss-hwm", 100.0, 100.0 + compile_s),
    ).to_dict()  # fmt: skip


S = {
    "none": Strategy.create("none"),
    "A": Strategy.create("full", "aot_eager"),
    "B": Strategy.create("full", "inductor"),
    "C": Strategy.create("regional", "eager"),
    "D": Strategy.create("full", "inductor", "max-autotune-no-cudagraphs"),
    "E": Strategy.create("regional", "aot_eager"),
    "N": Strategy.create("nested", "inductor"),
}


def stored(key: str, number: int | None, payload: dict, deduced_from: str | None = None) -> Stored:
    """A stored measurement as the store hands it out, without a store."""
    return Stored(number or 0, key, number, payload["status"], payload, None, deduced_from, None)


def hand_rows(with_nested: bool = False, feasible: bool = True) -> list[Stored]:
    """none (0 s, 10 ms); A (1 s, 5 ms); B (10 s, 2 ms); C (0.5 s, 12 ms, slower than eager);
    D (20 s, 1.9 ms, wrong answers); E (2 s, 6 ms, dominated by A)."""
    rows = {"none": (0.0, 10.0), "A": (1.0, 5.0), "B": (10.0, 2.0), "C": (0.5, 12.0),
            "D": (20.0, 1.9), "E": (2.0, 6.0)}  # fmt: skip
    if with_nested:
        rows["N"] = (0.8, 4.0)
    return [stored(S[name].key, i, point(S[name], c, ms, ok=feasible and name != "D"))
            for i, (name, (c, ms)) in enumerate(rows.items())
            if feasible or name != "none"]  # fmt: skip


def hand_built(tmp_path: Path, with_nested: bool = False, feasible: bool = True) -> Store:
    """The rows of :func:`hand_rows` in a real SQLite study named ``hand``."""
    store = Store(f"sqlite:///{tmp_path}/hand.db")
    store.add_study("hand", {"model": {"name": "toy-64"}}, {"torch": torch.__version__})
    for row in hand_rows(with_nested, feasible):
        store.add_measurement("hand", row.key, row.trial_number, row.payload)
    return store


def generated_graphs(gen: Any, model: Any, requests: list[tuple[int, int]]) -> list[int]:
    """Each (prompt length, new tokens) request generated greedily on ``gen`` (a tiny llama's
    ``apply_generation``), its tokens asserted ``model``'s own; the graphs each compiled, by
    Dynamo's counter."""
    from autotune.trial import metrics
    from tests import models

    graphs = []
    for seq, n in requests:
        ids = models.tiny_llama.make_inputs(1, seq)[0]
        before = metrics.compile_counts()[0]
        with torch.no_grad():
            out = gen.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        graphs.append(metrics.compile_counts()[0] - before)
        with torch.no_grad():
            expected = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        assert torch.equal(out, expected), (seq, n)
    return graphs


def traffic_trial(ref: Any, workload: Any, strategy: Any, settings: Any) -> Any:
    """A traffic's trial (its scenario) run in this process, so that a test can watch it."""
    import torch

    from autotune.trial.request import Request
    from autotune.trial.scenarios import TrafficTrial, begin

    torch._dynamo.reset()
    scenario = TrafficTrial(begin(Request.trial(ref, workload, strategy, settings)))
    scenario.run()
    return scenario
