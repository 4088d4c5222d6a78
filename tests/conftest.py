"""Shared fixtures: a real, small study in a real SQLite file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.spec import StudySpec
from autotune.study import Search

FAST = {
    "model": "toy-64", "layers": 4, "device": "cpu", "iters": 3, "warmup": 1, "timeout": 120,
}  # fmt: skip


def fast_spec(**over: object) -> StudySpec:
    """A toy-64 study over fast backends only (no inductor), quick enough for CI."""
    flags = {**FAST, "backend": "eager,aot_eager", **over}
    return StudySpec.from_sources(None, **flags)


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
        search = Search(spec, f"sqlite:///{folder}/t.db")
        search.outcome = search.run(progress=False)  # type: ignore[attr-defined]
        yield search
    finally:
        os.chdir(old)
