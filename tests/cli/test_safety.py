"""Safe by default: no code runs from data, bad input is one line, faults lose nothing. Each
refusal from both sides: what must be refused, and what must still work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import torch

import autotune
from autotune.cli import main
from autotune.errors import ConfigError
from autotune.storage import Store
from autotune.strategy import Strategy
from tests.helpers import hand_built
from tests.models import tiny_toy

ROOT = str(Path(__file__).resolve().parents[2])
SIDE_EFFECT = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")

def backend(gm, example_inputs):
    return gm
"""


@pytest.fixture
def side_effect(in_tmp: Path) -> Path:
    """A module that writes a marker file when it is imported (a real side effect)."""
    marker = in_tmp / "IMPORTED"
    (in_tmp / "sideeffect.py").write_text(SIDE_EFFECT.format(marker=str(marker)))
    return marker


def _best(path: Path, strategy: Strategy) -> Path:
    path.write_text(json.dumps({"autotune": {"strategy": strategy.to_dict()}}))
    return path


def test_apply_never_imports_a_backend_the_file_names(side_effect: Path, in_tmp: Path) -> None:
    best = _best(in_tmp / "best.json", Strategy.create("full", "sideeffect:backend"))
    before = list(sys.path)
    model, (x,) = tiny_toy()
    with pytest.raises(ConfigError, match="names backend 'sideeffect:backend', which is code"):
        autotune.apply(model, best)
    with pytest.raises(ConfigError, match="Accelerate's TorchDynamoPlugin cannot take"):
        autotune.load_plugin(best)
    with pytest.raises(ConfigError, match="needs a transformers model that generates"):
        autotune.apply_generation(model, best)
    assert not side_effect.exists() and sys.path == before
    from autotune.ship.formats import torch_kwargs

    assert torch_kwargs(Strategy.create("full", "sideeffect:backend"))["backend"] == (
        "sideeffect:backend")  # fmt: skip
    assert not side_effect.exists()
    calls: list[int] = []

    def mine(gm, example_inputs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return gm

    compiled = autotune.apply(model, best, backends={"sideeffect:backend": mine})
    assert torch.equal(compiled(x), model(x)) and calls and not side_effect.exists()
    allowed = autotune.apply(model, best, backends=["sideeffect"])  # an import, by name
    assert torch.equal(allowed(x), model(x)) and side_effect.exists()
    assert sys.path == before  # the current folder was first on sys.path for the import alone


def test_a_spec_file_or_a_stored_study_runs_no_code_the_command_line_did_not_name(
    side_effect: Path, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (in_tmp / "s.toml").write_text(
        '[model]\nname = "toy-64"\nlayers = 2\n[workload]\ndevice = "cpu"\n[space]\n'
        'granularity = ["none", "full"]\nbackend = ["sideeffect:backend", "eager"]\n'
        'dynamic = ["none"]\nfullgraph = [false]\n[search]\niters = 2\nstudy = "code"\n'
    )
    args = ["search", "--space", "s.toml", "--no-progress", "--no-confirm"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "spec file s.toml names code" in err and "--allow-code sideeffect" in err
    assert err.count("\n") == 1 and not side_effect.exists()
    assert main([*args, "--allow-code", "sideeffect"]) == 0 and side_effect.exists()
    side_effect.unlink()
    assert main(["submit", "--space", "s.toml", "--study", "shared"]) == 0
    capsys.readouterr()
    assert main(["worker", "--study", "shared", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "study 'shared' names code" in err and "backend sideeffect:backend" in err
    assert not side_effect.exists()
    assert main(["worker", "--study", "shared", "--no-progress", "--allow-code",
                 "sideeffect:backend"]) == 0  # fmt: skip


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('[workload]\nbatch_size = "x"', "batch_size = 'x': expected a whole number"),
        ("[search]\nobjectives = 5", "bad objectives 5"),
        ("[search]\npolicy = 5", "bad policy 5"),
        ("[search]\nstudy = 5", "bad study name 5"),
        ("[search]\ntimeout = [1]", "timeout = [1]: expected a number"),
        ("[search]\nstarts = 5", "starts = 5: expected a comma list"),
        ('[search]\ntrials = "abc"', "trials = 'abc': expected a whole number"),
        ("[search]\ntrials = 2.7", "trials = 2.7: expected a whole number"),
        ("[search]\ntrials = true", "trials = True: expected a whole number"),
        ('[search]\nequivalence = "no"', "equivalence = 'no': expected true or false"),
        ("[search]\ntime_budget = true", "time_budget = True: expected a duration"),
        ("[search]\nmax_memory = true", "max_memory = True: expected a size"),
        ('[search]\npolicy = "amortized:nan"', "the numbers must be finite and positive"),
        ('[search]\npolicy = "restarts:1.5:10"', "STARTS is a whole number"),
        ('[search]\nstudy = "../../escape"', "bad study name '../../escape'"),
        ('[search]\nstudy = " "', "bad study name ' '"),
        (f'[search]\nstudy = "{"x" * 300}"', "bad study name: 300 characters"),
    ],
)
def test_wrong_values_in_a_spec_file_are_one_line_naming_the_key(
    toml: str, needle: str, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (in_tmp / "s.toml").write_text(toml + "\n")
    code = main(["search", "--model", "toy-64", "--space", "s.toml", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (in_tmp / "studies").exists()  # nothing written


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["measure", "--model", "toy-64", "--backend", ":fn"], "bad backend ':fn'"),
        (["search", "--model", "toy-64", "--study", "../../escape"], "bad study name"),
        (["export", "--study", "../x"], "bad study name"),
        (["dashboard", "--study", "a/b"], "bad study name"),
        (["studies", "--storage", "foo://bar"], "Can't load plugin"),
    ],
)
def test_bad_arguments_are_one_line(argv: list[str], needle: str, in_tmp: Path, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_file_from_another_machine_or_torch_says_so_and_still_works(in_tmp: Path) -> None:
    model, (x,) = tiny_toy()
    data = {"autotune": {"strategy": Strategy.create("full", "eager").to_dict(),
                         "environment": {"torch": "1.0.0"}}}  # fmt: skip
    (in_tmp / "a.json").write_text(json.dumps(data))
    with pytest.warns(autotune.AutotuneWarning, match="measured with torch 1.0.0"):
        assert torch.equal(autotune.apply(model, in_tmp / "a.json")(x), model(x))
    data["autotune"]["strategy"] = {**Strategy.create("full", "eager").to_dict(),
                                    "backend": "nonesuch"}  # fmt: skip
    (in_tmp / "b.json").write_text(json.dumps(data))
    with pytest.warns(autotune.AutotuneWarning) as caught:
        assert autotune.apply(model, in_tmp / "b.json") is model  # uncompiled, but working
    assert _said(caught, "measured with torch 1.0.0", "backend 'nonesuch', which this torch")
    data["autotune"]["strategy"] = Strategy.create("full", "inductor", "turbo-mode").to_dict()
    data["autotune"]["cache_artifact"] = {"file": "../../etc/passwd", "sha256": 5}
    (in_tmp / "c.json").write_text(json.dumps(data))
    with pytest.warns(autotune.AutotuneWarning) as caught:
        fitted = autotune.apply(model, in_tmp / "c.json", trust_artifact=True)
    assert fitted is not model  # compiled, with mode default
    assert _said(caught, "measured with torch 1.0.0", "mode 'turbo-mode'",
                 "cache_artifact block is malformed")  # fmt: skip


def _said(caught: pytest.WarningsRecorder, *needles: str) -> bool:
    """Every autotune warning caught is one of ``needles``, and each needle was said once."""
    messages = [str(w.message) for w in caught if issubclass(w.category, autotune.AutotuneWarning)]
    return len(messages) == len(needles) and all(
        sum(needle in m for m in messages) == 1 for needle in needles
    )


def test_a_malformed_or_unvouched_artefact_is_one_line(in_tmp: Path) -> None:
    from autotune.starts import artifact

    for block, needle in (({"sha256": 5}, "malformed"), ({"sha256": "x", "file": "../p"},
                          "names no file"), ({"sha256": "x"}, "missing")):  # fmt: skip
        data = {"autotune": {"cache_artifact": block}}
        with pytest.warns(artifact.CacheWarning, match=needle):
            assert artifact.prepare(data, in_tmp / "best.json", trust=True) is False
    (in_tmp / "best.cache.bin").write_bytes(b"x")
    data = {"autotune": {"cache_artifact": {"sha256": artifact.sha256(b"x")}}}
    with pytest.warns(artifact.CacheWarning, match="says nothing of what it was made with"):
        assert artifact.prepare(data, in_tmp / "best.json", trust=True) is False
    with pytest.warns(artifact.CacheWarning, match="not loaded: loading it runs code"):
        assert artifact.prepare(data, in_tmp / "best.json") is False  # not trusted


def test_resuming_with_a_narrower_space_works_and_fails_no_trial(in_tmp: Path, capsys) -> None:
    base = ["search", "--model", "toy-64", "--layers", "2", "--granularity", "none,full",
            "--dynamic", "none", "--fullgraph", "false", "--iters", "2", "--no-progress",
            "--no-confirm", "--study", "narrow"]  # fmt: skip
    assert main([*base, "--backend", "eager,aot_eager", "--trials", "2"]) == 0
    assert main([*base, "--backend", "eager", "--trials", "3"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    study = optuna.load_study(study_name="narrow", storage="sqlite:///studies/autotune.db")
    assert [t for t in study.trials if t.state.name == "FAIL"] == []


def _mount_tmpfs(folder: Path) -> None:
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip("needs root to mount a 1 MiB tmpfs (a full disk)")


@pytest.mark.slow
def test_a_full_disk_is_one_line_at_once_and_leaves_nothing_running(tmp_path: Path) -> None:
    full, roomy = tmp_path / "full", tmp_path / "roomy"
    _mount_tmpfs(full)
    argv = [sys.executable, "-m", "autotune.cli", "search", "--model", "toy-64", "--layers",
            "2", "--backend", "eager,aot_eager", "--granularity", "none,full,regional",
            "--iters", "3", "--no-progress", "--no-confirm", "--study", "full"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": ROOT, "AUTOTUNE_GRACE_S": "2"}
    try:
        start = time.monotonic()
        out = subprocess.run([*argv, "--storage", f"sqlite:///{full}/a.db"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert time.monotonic() - start < 120  # not 5 minutes of "unreachable, retrying"
        assert out.returncode == 2 and "the disk is full" in out.stderr, out.stderr[-2000:]
        told = [line for line in out.stderr.splitlines() if not line.startswith("autotune: plan:")]
        assert len(told) == 1 and "unreachable" not in out.stderr  # the plan, then one line
        roomy.mkdir()
        for f in full.iterdir():  # the same database, where there is room again
            (roomy / f.name).write_bytes(f.read_bytes())
    finally:
        subprocess.run(["umount", str(full)], check=False)
    url = f"sqlite:///{roomy}/a.db"
    kept = {r.key for r in Store(url).measurements("full")}
    assert kept  # what was stored before the disk filled
    time.sleep(3)  # the crashed run's claim is silent for its grace period
    more = [*argv, "--trials", str(len(kept) + 1), "--storage", url]
    again = subprocess.run(more, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    study = optuna.load_study(study_name="full", storage=url)
    assert not [t for t in study.trials if t.state.name == "RUNNING"]
    now = {r.key for r in Store(url).measurements("full")}
    assert kept < now  # nothing lost, and the study went on


def test_studies_on_an_empty_postgresql_database_lists_none(postgres, capsys) -> None:
    postgres.psql("CREATE DATABASE empty OWNER autotune")
    assert main(["studies", "--storage", postgres.url.rsplit("/", 1)[0] + "/empty"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("0 studies in postgresql://autotune:***@")


def test_export_on_a_read_only_database_writes_the_file_and_says_it_was_not_recorded(
    in_tmp: Path, capsys
) -> None:
    hand_built(in_tmp)
    read_only = f"sqlite:///file:{in_tmp / 'hand.db'}?mode=ro&uri=true"
    assert main(["export", "--study", "hand", "--storage", read_only, "-o", "ro.json"]) == 0
    err = capsys.readouterr().err
    assert (in_tmp / "ro.json").is_file() and "did not record the export" in err
    assert "read-only" in err and err.count("\n") == 1
    assert Store(f"sqlite:///{in_tmp / 'hand.db'}").exports("hand") == []
    writable = f"sqlite:///{in_tmp / 'hand.db'}"  # the other side: recorded, no note
    assert main(["export", "--study", "hand", "--storage", writable, "-o", "rw.json"]) == 0
    assert "did not record" not in capsys.readouterr().err
    assert len(Store(writable).exports("hand")) == 1
