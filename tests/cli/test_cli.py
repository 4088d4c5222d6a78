from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.cli import main
from autotune.storage import Store


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "nope"], "unknown model 'nope': use a preset (toy-64, gemma-2b"),
        (["--model", "toy-64", "--dtype", "float8"], "bad dtype 'float8'"),
        (["--model", "toy-64", "--device", "tpu"], "bad device 'tpu'"),
        (["--model", "toy-64", "--device", "cuda"], "sees no CUDA device"),
        (["--model", "toy-64", "--backend", "nonesuch"], "backend 'nonesuch' is not registered"),
        (["--model", "toy-64", "--mode", "turbo"], "mode 'turbo' does not exist"),
        (["--model", "gemma-2b", "--weights", "/nonexistent"], "/nonexistent"),
        (["--model", "toy-64", "--granularity", "partial"], "bad granularity"),
        (["--model", "toy-64", "--workload", "serve"], "bad workload 'serve'"),
        (["--model", "toy-64", "--batch-size", "x"], "batch_size = 'x': expected a whole number"),
        (["--model", "nomod:fn"], "no module named 'nomod'"),
        (["--model", "toy-64", "--buckets", "auto:0"], "auto:K (K from 1 to 64)"),
        (["--model", "toy-64", "--prefill", "lazy"], "bad prefill 'lazy'"),
        (["--model", "toy-64", "--kv-cache", "pow3"], "bad kv_cache 'pow3'"),
        (["--model", "toy-64", "--prefill", "eager"], "--prefill and --kv-cache are the generate"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(argv: list[str], needle: str, capsys,
                                           monkeypatch) -> None:  # fmt: skip
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # as a CPU machine answers
    try:
        code = main(["measure", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.slow
def test_console_script_measure_json_and_models() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "measure", "--model", "toy-64", "--layers", "4",
         "--backend", "aot_eager", "--granularity", "regional", "--iters", "3", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    data = json.loads(out.stdout)
    assert data["status"] == "ok" and data["regions"] == 5
    assert data["strategy"]["granularity"] == "regional"
    models = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "models"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "gemma-2b" in models and "toy-64" in models and "llama-3.2-1b" in models


def test_debug_shows_the_traceback() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "--debug", "measure", "--model", "nope"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode != 0 and "Traceback" in out.stderr


@pytest.mark.parametrize(
    ("argv", "space", "needle"),
    [
        (["--storage", "nota url"], None, "malformed storage URL"),
        (
            ["--storage", "postgresql://u:hunter2@127.0.0.1:1/db"],
            None,
            "storage postgresql://u:***@",
        ),
        (["--storage", "sqlite:////no/such/folder/x.db"], None, "folder /no/such/folder"),
        ([], "[space]\nflavour = ['x']\n", "unknown key 'flavour' in [space]"),
        ([], "[space]\ngranularity = ['partial']\n", "bad granularity 'partial'"),
        ([], "[space]\nbackend = ['nonesuch']\n", "unknown backend 'nonesuch'"),
        ([], "[search]\ntrials = 0\n", "trials = 0: expected a whole number of at least 1"),
        ([], "[bogus]\n", "unknown table [bogus]"),
        (["--granularity", "full", "--backend", "cudagraphs"], None, "search space is empty"),
        (["--granularity", ","], None, "search space is empty: no granularity"),
        (["--policy", "median"], None, "bad policy 'median'"),
        (["--time-budget", "soon"], None, "bad duration 'soon'"),
        (["--time-budget", "0"], None, "bad duration '0': it must be above 0"),
        (["--seq-len", "16..64", "--buckets", "auto:99"], None, "auto:K (K from 1 to 64)"),
        (["--workers", "0"], None, "--workers must be at least 1"),
    ],
)
def test_search_bad_input_is_one_line_and_writes_nothing(
    argv: list[str], space: str | None, needle: str, in_tmp, capsys, monkeypatch
) -> None:
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # as a CPU machine answers
    args = ["search", "--model", "toy-64", "--layers", "2", *argv]
    if space is not None:
        (in_tmp / "s.toml").write_text(space)
        args += ["--space", str(in_tmp / "s.toml")]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err and err.count("\n") == 1 and "hunter2" not in err
    assert not (in_tmp / "studies" / "autotune.db").exists()


def test_export_of_an_unknown_study_or_missing_database(in_tmp, capsys) -> None:
    assert main(["export", "--study", "nope"]) == 2
    assert "no study database at studies/autotune.db" in capsys.readouterr().err
    assert not (in_tmp / "studies").exists()


def test_search_json_with_the_memory_objective(in_tmp, capsys) -> None:
    import optuna

    code = main(["search", "--model", "toy-64", "--layers", "2", "--backend", "eager",
                 "--granularity", "none,full", "--dynamic", "none", "--fullgraph", "false",
                 "--iters", "2", "--objectives", "compile,latency,memory", "--json",
                 "--study", "mem", "--no-progress"])  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["study"] == "mem" and result["stopped"] == "exhausted"
    assert result["measured"] == 2 and Path(result["export"]).is_file()
    assert all(p["memory_mb"] > 0 for p in result["pareto_front"])
    study = optuna.load_study(study_name="mem", storage="sqlite:///studies/autotune.db")
    assert study.metric_names == ["compile_s", "latency_ms", "memory_mb"]
    assert all(len(t.values) == 3 for t in study.trials if t.state.name == "COMPLETE")
    optuna_front = {t.user_attrs["key"] for t in study.best_trials}
    assert optuna_front == {p["key"] for p in result["pareto_front"]}


@pytest.mark.slow
def test_an_inductor_search_with_options_ends_quietly(in_tmp) -> None:
    """Inductor's compile workers leave semaphores in the trial; they are cleaned up there. The
    freezing switch is searched off and on, and the stored trials carry it."""
    out = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "search", "--model", "toy-64", "--layers", "2",
         "--granularity", "full", "--backend", "inductor", "--mode", "default", "--dynamic",
         "none", "--fullgraph", "false", "--options", "freezing", "--iters", "3",
         "--starts", "cold", "--no-progress", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "leaked" not in out.stderr and "Warning" not in out.stderr
    store = Store("sqlite:///studies/autotune.db", create=False)
    (study,) = store.studies()
    rows = {r.key: r.payload for r in store.measurements(study.name)}
    frozen = "full/inductor/default/dynamic=auto/breaks-ok/freezing"
    assert set(rows) == {"none", "full/inductor/default/dynamic=auto/breaks-ok", frozen}
    assert rows[frozen]["strategy"]["options"] == ["freezing"] and rows[frozen]["status"] == "ok"
    trials = optuna.load_study(study_name=study.name, storage=store.url).trials
    assert sorted(t.params["freezing"] for t in trials) == [False, True]  # eager is no trial here


def test_the_time_split_line_says_what_the_harness_adds_to_the_compiles() -> None:
    from autotune.cli import text

    split = {"compile": 60.0, "first pass": 130.0, "steady state": 80.0, "confirmation": 150.0,
             "reference": 50.0, "rest": 10.0, "total": 480.0}  # fmt: skip
    line = text.time_split(split)
    assert line.startswith("time: 480 s in all (8.0x the compiles measured): compile 60 s, ")
    assert "confirmation 150 s" in line and "rest 10 s" in line and "total" not in line
    assert "(no compile)" in text.time_split({**split, "compile": 0.0})


def test_the_confirmation_is_announced_only_when_a_compiled_strategy_passed(
    in_tmp, capsys
) -> None:
    base = ["search", "--model", "toy-64", "--layers", "2", "--backend", "eager", "--dynamic",
            "none", "--fullgraph", "false", "--iters", "2", "--no-progress"]  # fmt: skip
    assert main([*base, "--granularity", "none", "--study", "alone"]) == 0
    told = capsys.readouterr()
    assert "nothing to confirm" in told.out
    assert "confirming the pick" not in told.out + told.err
    assert main([*base, "--granularity", "none,full", "--study", "two"]) == 0
    told = capsys.readouterr()
    assert "confirming the pick against its nearest rivals" in told.out + told.err


def test_the_search_command_is_a_shell_around_one_tuning() -> None:
    """``autotune search`` parses, builds one Tuning (:class:`LocalTuning`: here or in its
    worker processes) and prints, in at most 40 lines; its default budget is the spec's one
    rule (``StudySpec.from_sources(searched=True)``), never its own."""
    import inspect

    from autotune.cli.search import cmd_search, searched

    source = inspect.getsource(cmd_search)
    assert len(source.splitlines()) <= 40
    assert "LocalTuning.open(" in source and "time_budget" not in source
    assert "searched=True" in inspect.getsource(searched)
