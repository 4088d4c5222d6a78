"""Objectives (autotune/choice/objectives.py): goodput is an objective of a continuous workload
with SLO targets, maximised, and refused in one line anywhere else, through the command line."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.choice import objectives
from autotune.cli import main

CONTINUOUS = ["--model", "toy-64", "--workload", "continuous", "--rate", "5"]


def _code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return int(exc.code or 0)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (CONTINUOUS, "objective goodput counts the requests that meet --slo"),
        (
            ["--model", "toy-64", "--workload", "generate"],
            "objective goodput needs --workload continuous",
        ),
        (["--model", "toy-64"], "objective goodput needs --workload continuous"),
    ],
)
def test_goodput_without_targets_or_on_another_workload_is_refused_in_one_line(
    argv: list[str], needle: str, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _code(["search", *argv, "--objectives", "compile,goodput"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err
    assert "Traceback" not in err and not (in_tmp / "studies").exists()


def _space(tmp_path: Path, workload: str, objectives: str) -> str:
    path = tmp_path / "goodput.toml"
    path.write_text(f'[model]\nname = "toy-64"\n[workload]\n{workload}\n'
                    f'[search]\nobjectives = "{objectives}"\n')  # fmt: skip
    return str(path)


@pytest.mark.parametrize("memory", ["", ",memory"])
def test_goodput_with_targets_is_a_study_s_objective_that_optuna_maximises(
    memory: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The other side of both refusals: a continuous workload with its --slo targets submits a
    study whose goodput Optuna maximises (a start cost and memory it minimises)."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    workload = 'kind = "continuous"\nrate = 5.0\nslo = "ttft=500ms,tpot=50ms"'
    space = _space(tmp_path, workload, f"compile,goodput{memory}")
    assert _code(["submit", "--space", space, "--storage", url]) == 0, capsys.readouterr().err
    name = capsys.readouterr().out.split()[2]
    study = optuna.load_study(study_name=name, storage=url)
    expected = [optuna.study.StudyDirection.MINIMIZE, optuna.study.StudyDirection.MAXIMIZE]
    assert study.directions == expected + expected[:1] * bool(memory)
    names = ["compile_s", "goodput_per_s", "memory_mb"]
    assert study.metric_names == (names if memory else names[:2])


def test_a_submitted_spec_without_targets_is_refused_as_the_search_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    space = _space(tmp_path, 'kind = "continuous"\nrate = 5.0', "compile,goodput")
    assert _code(["submit", "--space", space, "--storage", url]) == 2
    err = capsys.readouterr().err
    assert "objective goodput counts the requests that meet --slo" in err, err
    assert err.count("\n") == 1 and not (tmp_path / "g.db").exists()


def test_goodput_counts_as_the_one_speed_and_is_maximised() -> None:
    objectives.check(("compile", "goodput", "memory"), ("cold",), "continuous", "ttft=1s")
    with pytest.raises(objectives.ConfigError, match="bad objectives"):  # two speeds
        objectives.check(("compile", "ttft", "goodput"), ("cold",), "continuous", "ttft=1s")
    assert objectives.directions(("compile", "goodput")) == ["minimize", "maximize"]


@pytest.mark.slow
def test_a_continuous_search_with_goodput_as_objective_shows_it_as_measured(
    tmp_path: Path,
) -> None:
    """The whole command (about 30 s): a tiny Llama's continuous search over eager and one
    compile, goodput its objective; the front's table shows it in req/s, Optuna holds it
    maximised and as measured (never negative)."""
    import os
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'g.db'}"
    cmd = [sys.executable, "-m", "autotune.cli", "search", "--model", "tests.models:tiny_llama",
           "--workload", "continuous", "--rate", "40", "--seq-len", "4..16", "--new-tokens",
           "2..4", "--requests", "4", "--slo", "ttft=10s", "--objectives", "compile,goodput",
           "--granularity", "none,full", "--backend", "eager", "--dynamic", "none",
           "--fullgraph", "false", "--batching", "none", "--iters", "4", "--warmup", "1",
           "--starts", "cold", "--no-progress", "--no-confirm", "--storage", url,
           "--study", "g"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "goodput" in done.stdout and " req/s " in done.stdout, done.stdout
    study = optuna.load_study(study_name="g", storage=url)
    assert study.directions[1] == optuna.study.StudyDirection.MAXIMIZE
    values = [t.values[1] for t in study.trials if t.values]
    assert values and all(v > 0 for v in values)
