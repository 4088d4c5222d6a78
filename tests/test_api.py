"""The public API: one warning root, what is exported, ``apply`` and ``apply_generation``
leaving the caller's environment as they found it, and ``tune()`` running a whole study."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import autotune
from autotune.starts import artifact
from autotune.strategy import Strategy
from tests.models import tiny_llama, tiny_toy

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def refused_export(folder: Path, strategy: Strategy) -> Path:
    """An export whose artefact fits this machine (checksum, fingerprint) but that torch
    refuses to load: the case where autotune must keep what the load wrote out of the
    compile."""
    data = b"not a mega-cache at all"
    (folder / "best.cache.bin").write_bytes(data)
    block = {"file": "best.cache.bin", "sha256": artifact.sha256(data), "bytes": len(data),
             "fingerprint": artifact.requirements("cpu")}  # fmt: skip
    path = folder / "best.json"
    path.write_text(json.dumps({"autotune": {"strategy": strategy.to_dict(),
                                             "cache_artifact": block}}))  # fmt: skip
    return path


def test_one_warning_root_and_the_public_names() -> None:
    assert issubclass(autotune.CacheWarning, autotune.AutotuneWarning)
    assert artifact.CacheWarning is autotune.CacheWarning
    assert issubclass(autotune.ConfigError, autotune.AutotuneError)
    ref = autotune.ModelRef("toy-64", layers=2)
    assert autotune.ModelRef.from_dict(ref.to_dict()) == ref
    for name in autotune.__all__:
        assert getattr(autotune, name) is not None
    assert set(autotune.__all__) <= set(dir(autotune))
    from autotune.job.local import tune

    assert autotune.tune is tune
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        autotune.nope  # noqa: B018


def test_a_fork_server_s_preload_leaves_the_job_and_its_storage_out() -> None:
    """A trial's fork server imports autotune.trial.child: the public API's names load where
    they are used, so it imports neither the job nor SQLAlchemy and Optuna (a second of CPU
    in every fork server); ``import autotune`` then ``autotune.tune`` brings them in."""
    code = (
        "import sys, autotune.trial.child as c; print(sorted(m for m in ('autotune.job',"
        " 'sqlalchemy', 'optuna') if m in sys.modules)); import autotune; autotune.tune;"
        " print(sorted(m for m in ('autotune.job', 'sqlalchemy') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["[]", "['autotune.job', 'sqlalchemy']"]


def test_apply_leaves_the_environment_as_it_found_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    model, (x,) = tiny_toy()
    path = refused_export(tmp_path, Strategy.create("full", "aot_eager"))
    before = dict(os.environ)
    with pytest.warns(autotune.CacheWarning, match="failed to load"):
        compiled = autotune.apply(model, path, trust_artifact=True)
    assert dict(os.environ) == before
    during: list[str | None] = []
    compiled.register_forward_pre_hook(lambda *_: during.append(os.environ.get(CACHE_ENV)))
    torch.testing.assert_close(compiled(x), model(x))
    assert dict(os.environ) == before  # restored after the call, too
    assert during and "autotune-cold-" in str(during[0])  # the compile ran in a fresh folder


def test_apply_generation_takes_trust_artifact(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    model, _ = tiny_llama()
    path = refused_export(tmp_path, Strategy.create("full", "eager"))
    with pytest.warns(autotune.CacheWarning, match="not loaded: loading it runs code"):
        autotune.apply_generation(model, path)  # not trusted: never loaded
    before = dict(os.environ)
    with pytest.warns(autotune.CacheWarning, match="failed to load"):
        gen = autotune.apply_generation(model, path, trust_artifact=True)
    assert dict(os.environ) == before
    ids = torch.tensor([[1, 2, 3, 4]])
    out = gen.generate(ids, max_new_tokens=3, do_sample=False)
    want = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert torch.equal(out, want) and dict(os.environ) == before


def test_tune_searches_confirms_and_exports(in_tmp: Path) -> None:
    result = autotune.tune(
        "toy-64", layers=2, backend="eager", granularity="none,full,regional", trials=3,
        iters=3, warmup=1, storage=f"sqlite:///{in_tmp}/t.db", out=str(in_tmp / "pick.json"),
    )  # fmt: skip
    assert result.outcome.measured >= 2 and result.chosen is not None
    exported = json.loads((in_tmp / "pick.json").read_text())
    assert exported["autotune"]["strategy"] == Strategy.from_dict(result.chosen.strategy).to_dict()
    with pytest.raises(autotune.ConfigError):
        autotune.tune("no-such-model", storage=f"sqlite:///{in_tmp}/t.db")


def test_measure_is_public_without_the_search_s_plumbing() -> None:
    import inspect

    params = list(inspect.signature(autotune.measure).parameters)
    assert params == ["model", "workload", "strategy", "settings"]
    m = autotune.Measurement(Strategy.create("full", "eager").to_dict(), {}, {}, "ok")
    assert isinstance(m.strategy, Strategy) and m.model is None  # objects in memory
    assert m.to_dict()["strategy"] == Strategy.create("full", "eager").to_dict()  # dicts out


def test_storage_help_is_written_once() -> None:
    import argparse

    from autotune.cli import build_parser
    from autotune.cli.parser import STORAGE_HELP

    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = [
        a.help for p in sub.choices.values() for a in p._actions if "--storage" in a.option_strings
    ]
    assert len(helps) >= 8 and set(helps) == {STORAGE_HELP}
