"""Shared fixtures: a real, small study in a real SQLite file."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from autotune.search import Search, open_search, run
from autotune.trial import process
from tests.helpers import fast_spec

# Inductor's first load in a process with an empty cache directory compiles and loads a test
# program per vector ISA with gcc (5-6 s here; docs/benchmarks.md, "How much does a precompiled or
# AOTInductor start save?"), and every cold trial of the suite starts with an empty cache
# directory. The tests check what autotune does, not how long torch's probes take, so they trust
# the CPU's flags instead, as a user may with the same variable; the product and the benchmarks run
# with torch's default. This takes the suite from 6 min 50 s to 5 min 13 s on 2 cores.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
# Inductor's cache keys leave out torch's CPU capability: a kernel cached under
# ATEN_CPU_CAPABILITY=avx2 (.ci/run's AVX2 line, or a developer emulating an AVX2 CPU) aborted
# the next process that loaded it at AVX-512 ("Fatal Python error: Aborted", the xdist worker
# lost). The in-process tests keep a cache of their own per capability (trials have their own).
CAPABILITY = os.environ.get("ATEN_CPU_CAPABILITY") or "default"
INDUCTOR_CACHE = os.path.join(tempfile.gettempdir(), f"torchinductor-tests-{CAPABILITY}")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", INDUCTOR_CACHE)
# Bytecode is written (beside the sources, in __pycache__, which git ignores) even where the
# environment says not to (PYTHONDONTWRITEBYTECODE, as on the CI machines): the suite starts
# some 150 Python processes (commands, fork servers, scripts), and each would compile autotune's
# sources again, and each xdist worker rewrite the tests' asserts again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# One intra-op thread per process: the suite runs 3 xdist workers, each with trial children, on
# 2 cores, and torch's default (a thread per core) oversubscribes them; an OpenMP barrier then
# waits out a descheduled thread's time slice at every op. Under load one round of the tiny
# Llama over a traffic took 3.6 s instead of 25 ms, and test_traffic's four trials 150 s of
# CPU instead of 40. The tests check what autotune does, not torch's threading; the product and
# the benchmarks run with torch's default.
# This process's trial fork server imports AOTAutograd, Inductor and the catalog's transformers
# models once, instead of each child importing them on its first compile or build (1 to 4 s of
# CPU a child; tests/trial alone: 364 CPU-seconds before, 288 after). A child's compile time
# then leaves their import out: the tests check what autotune does, not how long torch's imports
# take; the product and the benchmarks run without it. Only this process's: the variable is
# gone again before any test starts a process, as each of those would pay the imports once for
# the few children it starts.
if "AUTOTUNE_PRELOAD" not in os.environ:
    os.environ["AUTOTUNE_PRELOAD"] = "compilers,transformers"
    process.fork_server()  # reads the variable once: no fork server is started yet
    del os.environ["AUTOTUNE_PRELOAD"]
if "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"  # every process the tests start inherits it
    torch.set_num_threads(1)  # this one imported torch before it was set


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that mostly wait (fault tests with real outages, several workers), then the
    slow ones, go first, so that pytest-xdist overlaps them with everything else instead of
    ending on them; the tests of the session's one toy study go to one xdist worker, so that
    it is built once."""
    order = ("long", "waits", "slow")
    for item in items:
        if "toy_study" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("toy_study"))

    def rank(item: pytest.Item) -> int:
        return next((i for i, m in enumerate(order) if item.get_closest_marker(m)), len(order))

    items.sort(key=rank)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a fresh folder (studies/ goes there), with the repo importable for tests.models."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    monkeypatch.delenv("AUTOTUNE_STUDIES", raising=False)
    return tmp_path


@pytest.fixture(scope="session")
def toy_study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Search]:
    """One finished toy-64 study (TPE, 10 measured strategies), for tests that only read it
    (the study's and the dashboard's); they run on one xdist worker, so it is built once."""
    folder = tmp_path_factory.mktemp("study")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AUTOTUNE_STUDIES", str(folder / "studies"))  # its caches go there
        spec = fast_spec(trials=10, granularity="none,full,regional,nested")
        search = open_search(spec, f"sqlite:///{folder}/t.db")
        search.outcome = run(search)  # type: ignore[attr-defined]
    yield search


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
