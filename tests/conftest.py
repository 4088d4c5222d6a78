"""Shared fixtures: a real, small study in a real SQLite file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from autotune.search import Search, open_search, run
from autotune.search.spec import StudySpec
from autotune.storage import Store, Stored
from autotune.strategy.strategy import Strategy
from autotune.trial.measurement import Accuracy, Latency, Measurement, Memory
from autotune.workload import Workload

# Inductor's first load in a process with an empty cache directory compiles and loads a test
# program per vector ISA with gcc (5-6 s here; BENCHMARKS.md, "Starts that skip the compiler"),
# and every cold trial of the suite starts with an empty cache directory. The tests check what
# autotune does, not how long torch's probes take, so they trust the CPU's flags instead, as a
# user may with the same variable; the product and the benchmarks run with torch's default.
# This takes the suite from 6 min 50 s to 5 min 13 s on 2 cores.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")

FAST = {
    "model": "toy-64", "layers": 4, "device": "cpu", "iters": 3, "warmup": 1, "timeout": 120,
}  # fmt: skip


def fast_spec(**over: object) -> StudySpec:
    """A toy-64 study over fast backends only (no inductor), quick enough for CI."""
    flags = {**FAST, "backend": "eager,aot_eager", **over}
    return StudySpec.from_sources(None, **flags)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that mostly wait (fault tests with real outages), then those that compile with
    inductor, go first, so that pytest-xdist overlaps them with everything else instead of
    ending on them."""

    def rank(item: pytest.Item) -> int:
        return next((i for i, m in enumerate(("long", "slow")) if item.get_closest_marker(m)), 2)

    items.sort(key=rank)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a fresh folder (studies/ goes there), with the repo importable for tests.models."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    return tmp_path


@pytest.fixture(scope="module")
def toy_study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Search]:
    """One finished toy-64 study (TPE, 10 measured strategies), shared by a test module."""
    folder = tmp_path_factory.mktemp("study")
    old = os.getcwd()
    os.chdir(folder)
    try:
        spec = fast_spec(trials=10, granularity="none,full,regional,nested")
        search = open_search(spec, f"sqlite:///{folder}/t.db")
        search.outcome = run(search)  # type: ignore[attr-defined]
        yield search
    finally:
        os.chdir(old)


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


@pytest.fixture(scope="session")
def postgres() -> Iterator[object]:
    """A real PostgreSQL server on loopback for the whole session."""
    from tests import postgres as pg

    if pg.bindir() is None:
        pytest.skip("needs PostgreSQL server binaries (Debian's postgresql; .ci/run installs it)")
    server = pg.start()
    try:
        yield server
    finally:
        pg.stop(server)
