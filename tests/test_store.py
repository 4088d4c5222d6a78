from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy

from autotune.errors import StorageError
from autotune.storage import SCHEMA_VERSION, Store, mask, resolve_url, scrub


def test_masking_hides_the_password_everywhere() -> None:
    url = "postgresql://alice:s3cret@db.example:5432/tune"
    assert mask(url) == "postgresql://alice:***@db.example:5432/tune"
    assert "s3cret" not in scrub(f"could not connect with {url}: auth failed for s3cret", url)
    assert mask("sqlite:///studies/a.db") == "sqlite:///studies/a.db"


def test_url_resolution_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    assert resolve_url(None) == "sqlite:///studies/autotune.db"
    monkeypatch.setenv("AUTOTUNE_STORAGE", f"sqlite:///{tmp_path}/env.db")
    assert resolve_url(None) == f"sqlite:///{tmp_path}/env.db"
    assert resolve_url(f"sqlite:///{tmp_path}/flag.db") == f"sqlite:///{tmp_path}/flag.db"


def test_schema_is_created_with_a_version_and_a_prefix(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/s.db")
    assert store.schema_version() == SCHEMA_VERSION
    tables = set(sqlalchemy.inspect(store.engine).get_table_names())
    ours = {t for t in tables if t.startswith("autotune_")}
    assert ours == {"autotune_meta", "autotune_studies", "autotune_runs",
                    "autotune_measurements", "autotune_exports", "autotune_claims"}  # fmt: skip
    store.add_study("s", {"model": {"name": "toy-64"}}, {"torch": "x"})
    store.add_run("s", {"torch": "x"})
    store.add_measurement("s", "none", 0, {"status": "ok"})
    with pytest.raises(sqlalchemy.exc.IntegrityError):  # a strategy is stored once per study
        store.add_measurement("s", "none", 1, {"status": "ok"})
    again = Store(f"sqlite:///{tmp_path}/s.db")  # reopening keeps everything
    assert [r.key for r in again.measurements("s")] == ["none"]


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/n.db")
    with store.engine.begin() as c:
        c.execute(sqlalchemy.text("UPDATE autotune_meta SET value='99'"))
    with pytest.raises(StorageError, match="schema 99, newer"):
        Store(f"sqlite:///{tmp_path}/n.db")
