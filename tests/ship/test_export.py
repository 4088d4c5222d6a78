"""Formats, and the round trip through the real Accelerate."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml
from accelerate import Accelerator
from accelerate.utils import TorchDynamoPlugin

import autotune
from autotune.catalog.toy import Toy
from autotune.cli import main
from autotune.ship import formats
from autotune.ship.export import export
from autotune.storage import Store
from autotune.strategy import Strategy
from tests.helpers import S, hand_built, point


def test_accelerate_export_round_trips_through_real_accelerate(tmp_path: Path) -> None:
    store = hand_built(tmp_path)
    path, chosen, notes = export(store, "hand", "knee", "accelerate", str(tmp_path / "b.json"))
    data = json.loads(path.read_text())
    fields = {f.name for f in dataclasses.fields(TorchDynamoPlugin)}
    assert set(data) == fields | {"autotune"}
    block = data.pop("autotune")
    assert block["granularity"] == "full" and block["policy"] == "knee" and not notes
    assert block["eager_baseline"]["latency_ms"] == pytest.approx(10.0)
    assert [p["key"] for p in block["pareto_front"]] == [S[k].key for k in ("none", "A", "B")]
    plugin = TorchDynamoPlugin(**data)
    torch.manual_seed(0)
    model, x = Toy(4).eval(), torch.randn(10, 10)
    prepared = Accelerator(dynamo_plugin=plugin, cpu=True).prepare(model)
    with torch.no_grad():
        assert torch.equal(prepared(x), model(x))
    assert store.exports("hand")[-1].key == chosen.key


def test_regional_export_prepares_regions_in_accelerate(tmp_path: Path) -> None:
    store = hand_built(tmp_path)
    path, chosen, _ = export(
        store, "hand", "latency-budget:6.5", "accelerate", str(tmp_path / "r.json")
    )
    torch.manual_seed(0)
    model, x = Toy(4).eval(), torch.randn(10, 10)
    plugin = autotune.load_plugin(path)
    assert chosen.key == S["A"].key and plugin.use_regional_compilation is False
    store.add_measurement("hand", "reg", 9, point(S["E"], 0.1, 3.0))  # now E is quick and fast
    path, chosen, _ = export(store, "hand", "knee", "accelerate", str(tmp_path / "r.json"))
    plugin = autotune.load_plugin(path)
    assert plugin.use_regional_compilation is True
    prepared = Accelerator(dynamo_plugin=plugin, cpu=True).prepare(model)
    with torch.no_grad():
        torch.testing.assert_close(prepared(x), model(x))


def test_nested_choice_is_said_in_the_file_and_on_screen(tmp_path: Path, capsys) -> None:
    hand_built(tmp_path, with_nested=True)
    out = tmp_path / "n.json"
    code = main(["export", "--storage", f"sqlite:///{tmp_path}/hand.db", "--study", "hand",
                 "--policy", "knee", "-o", str(out)])  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert data["autotune"]["granularity"] == "nested"
    assert "nested" in data["autotune"]["caveats"][0]
    assert "cannot express granularity 'nested'" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="nested"):
        autotune.load_plugin(out)


def test_yaml_and_torch_formats(tmp_path: Path) -> None:
    store = hand_built(tmp_path)
    path, _, notes = export(store, "hand", "fastest", "accelerate-yaml", str(tmp_path / "b.yaml"))
    section = yaml.safe_load(path.read_text())["dynamo_config"]
    assert section == {
        "dynamo_backend": "INDUCTOR", "dynamo_mode": "default", "dynamo_use_fullgraph": False,
        "dynamo_use_regional_compilation": False,
    }  # fmt: skip
    store.add_measurement("hand", "fast", 9, point(S["D"], 20.0, 1.0))
    path, _, notes = export(store, "hand", "fastest", "accelerate-yaml", str(tmp_path / "c.yaml"))
    assert "max-autotune-no-cudagraphs" in notes[0] and "NOTE" in path.read_text()
    path, _, _ = export(store, "hand", "knee", "torch", str(tmp_path / "t.json"))
    data = json.loads(path.read_text())
    assert data["granularity"] == "full"
    assert set(data) == {"torch_compile", "granularity", "autotune"}
    kwargs = data["torch_compile"]  # exactly torch.compile's keywords
    assert "mode" not in kwargs and {"backend", "dynamic", "fullgraph"} <= set(kwargs)
    torch.manual_seed(0)
    model, x = Toy(2).eval(), torch.randn(10, 10)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, **kwargs)(x), model(x))


@pytest.mark.parametrize("granularity", ["none", "full", "regional", "nested"])
def test_autotune_apply_honours_every_granularity(tmp_path: Path, granularity: str) -> None:
    store = Store(f"sqlite:///{tmp_path}/g.db")
    store.add_study("g", {"model": {"name": "toy-64"}}, {})
    s = Strategy.create(granularity, "aot_eager")
    store.add_measurement("g", s.key, 0, point(s, 0.0, 1.0))
    path, _, _ = export(store, "g", "fastest", "accelerate", str(tmp_path / "g.json"))
    torch.manual_seed(0)
    model, x = Toy(3).eval(), torch.randn(10, 10)
    compiled = autotune.apply(model, path)
    from autotune.strategy.granularity import count_regions

    assert (
        count_regions(compiled) == {"none": 0, "full": 1, "regional": 4, "nested": 1}[granularity]
    )
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def test_export_without_a_feasible_trial_is_one_line_and_writes_nothing(tmp_path: Path, capsys):
    hand_built(tmp_path, feasible=False)
    out = tmp_path / "none.json"
    code = main(["export", "--storage", f"sqlite:///{tmp_path}/hand.db", "--study", "hand",
                 "-o", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "no feasible trial" in err and err.count("\n") == 1
    assert not out.exists()
    assert Store(f"sqlite:///{tmp_path}/hand.db").exports("hand") == []


def _with_options(tmp_path: Path) -> tuple[Store, Strategy]:
    """The hand-built study, plus B with freezing: quicker to run than everything else."""
    store = hand_built(tmp_path)
    frozen = Strategy.create("full", "inductor", "default", None, False, ["freezing"])
    store.add_measurement("hand", frozen.key, 9, point(frozen, 11.0, 1.5))
    return store, frozen


def test_options_export_builds_the_plugin_and_prepare_gives_eager_s_outputs(
    tmp_path: Path,
) -> None:
    store, frozen = _with_options(tmp_path)
    path, chosen, notes = export(store, "hand", "fastest", "accelerate", str(tmp_path / "o.json"))
    assert chosen.key == frozen.key and not notes
    data = json.loads(path.read_text())
    assert data["options"] == {"freezing": True} and data["mode"] is None
    data.pop("autotune")
    plugin = TorchDynamoPlugin(**data)
    torch.manual_seed(0)
    model, x = Toy(4).eval(), torch.randn(10, 10)
    prepared = Accelerator(dynamo_plugin=plugin, cpu=True).prepare(model)
    with torch.no_grad():
        expected = model(x)
        torch.testing.assert_close(prepared(x), expected)  # compiled with freezing, by Inductor
    assert formats.from_accelerate(plugin) == frozen


def test_yaml_says_what_it_cannot_express_and_gives_the_closest(tmp_path: Path, capsys) -> None:
    store, _ = _with_options(tmp_path)
    out = tmp_path / "o.yaml"
    code = main(["export", "--storage", store.url, "--study", "hand", "--policy", "fastest",
                 "--format", "accelerate-yaml", "-o", str(out)])  # fmt: skip
    assert code == 0
    text, screen = out.read_text(), capsys.readouterr().err
    assert "no key for Inductor options (freezing)" in text and "freezing" in screen
    closest = S["B"].key  # B is frozen's strategy without the option, measured at 10 s, 2 ms
    assert f"closest expressible config: {closest} measured 10.0 s to compile, 2 ms" in text
    assert yaml.safe_load(text)["dynamo_config"]["dynamo_backend"] == "INDUCTOR"
    assert "options" not in yaml.safe_load(text)["dynamo_config"]
    path, _, _ = export(store, "hand", "fastest", "torch", str(tmp_path / "t.json"))
    kwargs = json.loads(path.read_text())["torch_compile"]
    assert kwargs == {"backend": "inductor", "fullgraph": False, "dynamic": None,
                      "options": {"freezing": True}}  # fmt: skip
