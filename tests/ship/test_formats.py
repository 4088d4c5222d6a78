"""Each format's fields for a strategy (autotune.ship.formats), through the real Accelerate and
transformers, and read back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from accelerate.utils import TorchDynamoPlugin
from transformers import CompileConfig

from autotune.errors import NotApplicable
from autotune.ship import accelerate_config, exported, formats
from autotune.strategy import Strategy
from autotune.workload import Workload

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "strategy",
    [
        Strategy.create("none"),
        Strategy.create("full", "inductor", "max-autotune-no-cudagraphs", False, True),
        Strategy.create("regional", "aot_eager", dynamic=True),
        Strategy.create("full", "eager"),
    ],
)
def test_accelerate_round_trip_through_the_real_plugin(strategy: Strategy) -> None:
    fields = formats.to_accelerate(strategy)
    plugin = TorchDynamoPlugin(**fields)
    assert formats.from_accelerate(plugin) == strategy
    assert formats.from_accelerate(fields) == strategy
    assert set(formats.accelerate_fields(strategy)) == {
        f.name for f in dataclasses.fields(TorchDynamoPlugin)
    }


def test_nested_is_never_silently_dropped_for_accelerate() -> None:
    nested = Strategy.create("nested", "inductor")
    assert "nested" in (formats.accelerate_caveat(nested) or "")
    with pytest.raises(NotApplicable, match="cannot express granularity 'nested'"):
        formats.to_accelerate(nested)
    approx = formats.to_accelerate(nested, approximate=True)
    assert approx["use_regional_compilation"] is False and approx["backend"] == "inductor"
    with pytest.raises(NotApplicable, match="DynamoBackend has no backend"):
        formats.to_accelerate(Strategy.create("full", "aot_eager_decomp_partition"))
    shaped = Strategy.create("full", buckets="pow2")
    assert "cannot pad to buckets" in (formats.accelerate_caveat(shaped) or "")
    assert formats.accelerate_caveat(Strategy.create("regional", "aot_eager")) is None


def test_options_round_trip_through_accelerate_s_plugin() -> None:
    s = Strategy.create(
        "regional", "inductor", "default", False, True, ["freezing", "cpp_wrapper"]
    )
    fields = formats.to_accelerate(s)
    assert fields["mode"] is None and fields["options"] == {"freezing": True, "cpp_wrapper": True}
    plugin = TorchDynamoPlugin(**fields)
    assert formats.from_accelerate(plugin) == s
    plain = Strategy.create("full", "inductor", "max-autotune-no-cudagraphs")
    assert formats.to_accelerate(plain)["options"] is None  # a mode alone stays a mode
    assert formats.from_accelerate(TorchDynamoPlugin(**formats.to_accelerate(plain))) == plain


def test_the_yaml_section_is_the_closest_strategy_without_options() -> None:
    s = Strategy.create("regional", "inductor", "default", True, False, ["freezing"])
    closest = formats.yaml_closest(s)
    assert closest.options == () and closest.granularity == "regional"
    text = accelerate_config.config_file(s, ["a note"], "hand", Workload(), merge=False)
    assert "# NOTE: a note" in text and "dynamo_use_regional_compilation: true" in text
    assert "dynamo_use_dynamic: true" in text and "freezing" not in text.split("\n", 1)[1]
    assert any("no key for Inductor options" in n for n in formats.caveats(s, "accelerate-yaml"))


def test_transformers_fields_are_exactly_compile_config_s() -> None:
    s = Strategy.create("full", "inductor", "default", None, True, ["freezing"])
    fields = formats.transformers_fields(s)
    assert fields["cache_implementation"] == "static"
    config = fields["compile_config"]
    assert set(config) == {f.name for f in dataclasses.fields(CompileConfig)}
    assert config["options"] == {"freezing": True} and config["mode"] is None
    assert CompileConfig(**config).fullgraph is True
    assert formats.transformers_fields(Strategy.create("none"))["disable_compile"] is True
    regional = formats.caveats(Strategy.create("regional"), "transformers")
    assert any("cannot express granularity 'regional'" in n for n in regional)


def test_a_generate_study_s_cache_and_eager_prefill_are_exported(tmp_path: Path) -> None:
    """The static cache's length rides in the autotune block and in transformers' fields; a
    prefill left eager is what transformers' compile_config does, and a caveat elsewhere."""
    from autotune.ship.apply import generation_config

    s = Strategy.create("full", "aot_eager", prefill="eager")
    block = {"strategy": s.to_dict(), "generation": formats.cache_fields(57)}
    path = tmp_path / "best.json"
    path.write_text(formats.render(s, "transformers", block, [], "hand") + "\n")
    fields = json.loads(path.read_text())["generation_config"]
    assert fields["max_cache_len"] == 57 and fields["cache_implementation"] == "static"
    assert generation_config(path).max_cache_len == 57
    compiled_prefill = formats.caveats(Strategy.create("full", "aot_eager"), "transformers")
    assert any("its prefill runs eager" in n for n in compiled_prefill)
    assert not any("its prefill runs eager" in n for n in formats.caveats(s, "transformers"))
    assert any("cannot say how generate runs" in n for n in formats.caveats(s, "torch"))
    assert formats.cache_length({"generation": {"max_cache_len": True}}) is None


@pytest.mark.parametrize("fmt", ["accelerate", "torch", "transformers"])
def test_every_json_format_reads_back_to_the_strategy(fmt: str, tmp_path: Path) -> None:
    s = Strategy.create("nested", "inductor", "default", False, True, ["freezing"])
    block = {"strategy": s.to_dict(), "caveats": []}
    path = tmp_path / f"{fmt}.json"
    path.write_text(formats.render(s, fmt, block, [], "hand") + "\n")
    assert exported.read(path)[0] == s  # exact from the autotune block, nested included
    data = json.loads(path.read_text())
    del data["autotune"]  # a hand-written file: what the format itself says
    if fmt == "torch":
        assert formats.strategy_of(data) == s
    elif fmt == "accelerate":  # nested approximated as one full compile, options kept
        assert formats.strategy_of(data) == Strategy.create("full", "inductor", "default",
                                                            False, True, ["freezing"])  # fmt: skip


def test_strategy_is_a_plain_value_and_only_formats_spells_tool_fields() -> None:
    assert not any(hasattr(Strategy, n) for n in ("to_accelerate", "from_accelerate",
                                                   "accelerate_caveat"))  # fmt: skip
    spelled = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "autotune").rglob("*.py")
        if "use_regional_compilation" in p.read_text() or "DynamoBackend" in p.read_text()
    ]
    assert spelled == ["autotune/ship/formats.py"]
