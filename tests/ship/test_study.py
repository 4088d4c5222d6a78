"""The read side (autotune/ship/study.py): ``autotune.load_study`` reads a stored study once and
answers under any policy from it; the search's summary, ``autotune show``, the export, the
service and the dashboard read through it."""

from __future__ import annotations

from pathlib import Path

import pytest

import autotune
from autotune.errors import ConfigError
from autotune.storage import Store
from tests.helpers import S, point

# none (0 s, 10 ms); A (1 s, 5 ms); B (10 s, 2 ms)
ROWS = {"none": (0.0, 10.0), "A": (1.0, 5.0), "B": (10.0, 2.0)}


def study(tmp_path: Path, policy: str = "fastest") -> str:
    url = f"sqlite:///{tmp_path}/s.db"
    store = Store(url)
    store.add_study(
        "s",
        {"model": {"name": "toy-64"}, "policy": policy, "objectives": ["compile", "latency"]},
        {},
    )
    for n, (name, (c, ms)) in enumerate(ROWS.items()):
        store.add_measurement("s", S[name].key, n, point(S[name], c, ms))
    store.engine.dispose()
    return url


def test_load_study_answers_under_its_policy_and_any_other(tmp_path: Path) -> None:
    view = autotune.load_study("s", study(tmp_path))
    assert view.name == "s" and len(view.rows) == 3 and len(view.measurements()) == 3
    assert view.answer().chosen.key == S["B"].key  # the study's own policy: fastest
    assert view.answer("quickest").chosen.key == S["A"].key  # the quickest compile that pays
    assert view.answer("amortized:100").chosen.key == S["none"].key  # 1 s against 1.5 and 10.2
    assert view.answer("amortized:1000").chosen.key == S["A"].key  # 6 s against 10 and 12
    assert view.tally() == {"measured": 3, "deduced": 0, "ok": 3, "failed": 0}
    assert {p.key for p in view.front()} >= {S["B"].key, S["none"].key}


def test_a_stored_confirmation_decides_the_answer(tmp_path: Path) -> None:
    url = study(tmp_path)
    store = Store(url)
    # the rounds showed B no faster than eager: its latency counts as eager's, A is the pick
    store.add_confirmation("s", "fastest", S["A"].key, {
        "chosen": S["B"].key, "pick": S["A"].key,
        "latency_ms": {S["B"].key: 10.0, S["A"].key: 5.0},
        "speedup": {S["B"].key: 1.0, S["A"].key: 2.0}})  # fmt: skip
    assert autotune.load_study("s", url).answer().chosen.key == S["A"].key


def test_a_missing_study_is_one_clear_error(tmp_path: Path) -> None:
    url = study(tmp_path)
    with pytest.raises(ConfigError, match="no study named 'other' in sqlite:"):
        autotune.load_study("other", url)
