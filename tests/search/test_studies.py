"""A store's studies with their specs typed (autotune.search.studies): read where they are
read, so that a garbled study fails there, never a listing of every study."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.search import studies
from autotune.storage import Store
from tests.helpers import fast_spec, hand_rows


def test_a_record_s_spec_is_the_study_spec_it_stored(tmp_path: Path) -> None:
    spec = fast_spec(trials=3, policy="fastest")
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.add_study("s", spec.to_dict(), {"torch": "x"})
    record = studies.study(store, "s")
    assert record is not None and record.spec == spec and record.environment == {"torch": "x"}
    assert [r.name for r in studies.studies(store)] == ["s"]
    assert studies.study(store, "none") is None


def test_a_garbled_study_fails_where_it_is_read_not_every_listing(tmp_path: Path) -> None:
    from autotune.search import join
    from autotune.search.overview import overview
    from autotune.ship.export import document
    from autotune.ship.study import StudyView

    url = f"sqlite:///{tmp_path}/g.db"
    store = Store(url)
    store.add_study("good", {"model": {"name": "toy-64"}, "trials": 3}, {})
    store.add_study("bad", {"model": {"name": "toy-64"}, "workload": {"kind": 7}}, {})
    worn = {"model": {"name": "toy-64"}, "policy": "fastest", "trials": "30", "sampler": "x"}
    store.add_study("worn", worn, {})  # what only a search runs by, garbled
    for row in hand_rows():
        store.add_measurement("worn", row.key, row.trial_number, row.payload)
    assert len(studies.studies(store)) == 3  # nothing read yet
    table = {row["study"]: row for row in overview(store)}
    assert table["good"]["budget"] == 3 and table["good"]["model"] == "toy-64"
    assert table["bad"]["model"] is None and table["bad"]["budget"] is None  # listed all the same
    with pytest.raises(ConfigError, match=r"study 'bad': .*kind = 7: expected text"):
        document(store, "bad", "knee", "accelerate")
    text, chosen, _ = document(store, "worn", "fastest", "accelerate")  # shows and exports
    assert chosen.key == StudyView.of(store, "worn").answer().chosen.key and '"fastest"' in text
    with pytest.raises(ConfigError, match=r"study 'worn': .*trials = '30'.*; sampler = 'x'"):
        join("worn", url)  # a worker never runs on a default in place of a stored value
    assert Store(url).study("worn").spec_json == worn  # type: ignore[union-attr]
