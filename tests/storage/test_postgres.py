"""PostgreSQL: the same search, unchanged, on a real server; bad URLs give one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import sqlalchemy

from autotune.cli import main
from autotune.search import open_search, run
from tests.helpers import fast_spec
from tests.postgres import PASSWORD


def test_a_search_runs_unchanged_on_postgresql(postgres, in_tmp: Path, capsys) -> None:
    url = postgres.url
    search = open_search(fast_spec(trials=3, study="pg-toy"), url)
    assert run(search).stopped == "budget"
    study = optuna.load_study(study_name="pg-toy", storage=url)
    assert len([t for t in study.trials if t.state.name == "COMPLETE"]) >= 3
    tables = set(sqlalchemy.inspect(sqlalchemy.create_engine(url)).get_table_names())
    assert {"autotune_studies", "autotune_measurements", "trials", "studies"} <= tables
    assert main(["studies", "--storage", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    row = next(r for r in rows if r["study"] == "pg-toy")
    assert row["measured"] == 3 and row["budget"] == 3 and row["runs"] == 1
    assert main(["export", "--storage", url, "--study", "pg-toy", "-o", "b.json"]) == 0
    out = capsys.readouterr()
    assert PASSWORD not in out.out + out.err
    assert PASSWORD not in Path("b.json").read_text()
    assert "autotune:***@" in json.loads(Path("b.json").read_text())["autotune"]["storage"]
    assert row["live workers"] == 0
    assert main(["dashboard", "--storage", url, "--study", "pg-toy", "-o", "d.html"]) == 0
    page = Path("d.html").read_text()
    assert PASSWORD not in page and "autotune:***@" in page


def test_bad_postgresql_urls_are_one_line_with_the_password_masked(postgres, in_tmp, capsys):
    wrong = postgres.url.replace(PASSWORD, "wrong-pw")
    unreachable = f"postgresql://autotune:{PASSWORD}@127.0.0.1:1/autotune"
    for url, needle in ((wrong, "password authentication failed"),
                        (unreachable, "Connection refused")):  # fmt: skip
        code = main(["search", "--model", "toy-64", "--layers", "2", "--storage", url])
        err = capsys.readouterr().err
        assert code == 2 and needle in err and err.count("\n") == 1
        assert PASSWORD not in err and "wrong-pw" not in err and "autotune:***@" in err
    assert not Path("studies").exists()
    code = main(["export", "--storage", postgres.url, "--study", "no-such-study"])
    err = capsys.readouterr().err
    assert code == 2 and "no study named 'no-such-study'" in err and PASSWORD not in err
