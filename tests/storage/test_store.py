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


@pytest.mark.parametrize(
    ("url", "shown", "secret"),
    [
        (
            "postgresql://u:p@ssZq9@127.0.0.1:5432/db",
            "postgresql://***@127.0.0.1:5432/db",
            "ssZq9",
        ),  # a raw '@': SQLAlchemy would split the password there
        (
            "postgresql://u:pa:ss9@127.0.0.1:5432/db",
            "postgresql://u:***@127.0.0.1:5432/db",
            "pa:ss9",
        ),  # a raw ':'
        ("postgresql://u:p%40ss%3Aw0rd@h/db", "postgresql://u:***@h/db", "p@ss:w0rd"),  # encoded
        ("post gres://u:hunter2@h/db", "post gres://***@h/db", "hunter2"),  # unparseable
        ("postgresql://h/db?password=hunter2", "postgresql://h/db?password=***", "hunter2"),
    ],
)
def test_masking_hides_odd_passwords_whole(url: str, shown: str, secret: str) -> None:
    assert mask(url) == shown and secret not in mask(url)
    assert secret not in scrub(f"connection to {url} failed; password {secret} rejected", url)


def test_a_url_whose_password_holds_a_raw_at_is_one_line_with_nothing_of_it(capsys) -> None:
    from autotune.cli import main

    code = main(["studies", "--storage", "postgresql://u:p@ssZq9@127.0.0.1:1/db"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "ssZq9" not in err and "Traceback" not in err
    assert "percent-encode" in err


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
                    "autotune_measurements", "autotune_exports", "autotune_claims",
                    "autotune_references", "autotune_confirmations"}  # fmt: skip
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


_OPEN_AT = """
import sys, time
from autotune.storage import Store
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
print(Store(sys.argv[1]).schema_version())
"""


@pytest.mark.slow
def test_processes_that_open_one_new_database_at_once_all_get_it(tmp_path: Path) -> None:
    """Six processes open the same new database at the same instant (a search and the test or
    the worker beside it): every one opens it, and the version is stamped once."""
    import os
    import subprocess
    import sys
    import time

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for n in range(3):
        url = f"sqlite:///{tmp_path}/race{n}.db"
        at = str(time.time() + 4.0)  # after every process has imported sqlalchemy
        procs = [subprocess.Popen([sys.executable, "-c", _OPEN_AT, url, at], text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
                 for _ in range(6)]  # fmt: skip
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err[-800:]
            assert out.strip() == str(SCHEMA_VERSION)
        with Store(url).engine.connect() as c:
            rows = c.execute(sqlalchemy.text("SELECT count(*) FROM autotune_meta")).scalar()
        assert rows == 1


def test_a_study_s_spec_is_handed_out_as_stored(tmp_path: Path) -> None:
    """The store hands out a spec's JSON as stored, untouched: StudySpec reads it
    (tests/search/test_spec.py)."""
    raw = {"model": {"name": "toy-64"}, "trials": "30", "gone": [1, {"x": None}]}
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.add_study("s", raw, {"torch": "x"})
    (found,) = store.studies()
    assert found == store.study("s") and found.spec_json == raw and found.name == "s"
