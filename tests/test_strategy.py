from __future__ import annotations

import pytest
from accelerate.utils import TorchDynamoPlugin

from autotune.errors import ConfigError, NotApplicable
from autotune.strategy import Strategy


def test_canonical_keys_merge_equivalent_strategies() -> None:
    # mode only matters for inductor; "default" is inductor's own default
    assert Strategy.create("full", "aot_eager", "max-autotune").key == (
        Strategy.create("full", "aot_eager").key
    )
    assert (
        Strategy.create("full", "inductor").key
        == Strategy.create("full", "inductor", "default").key
    )
    assert Strategy.create("full", "inductor", "max-autotune-no-cudagraphs").key != (
        Strategy.create("full", "inductor").key
    )
    # nothing matters for none
    assert Strategy.create("none", "inductor", "max-autotune", True, True) == Strategy.create(
        "none"
    )
    assert Strategy.create("none").key == "none"
    # a non-canonical instance canonicalises to the same key
    assert Strategy("full", "eager", "reduce-overhead").key == Strategy.create("full", "eager").key
    assert Strategy.create("regional", dynamic="true").dynamic is True


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"granularity": "partial"}, "bad granularity 'partial'"),
        ({"dynamic": "maybe"}, "bad dynamic value"),
    ],
)
def test_bad_fields_are_config_errors(fields: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        Strategy.create(**fields)


def test_validation_against_running_torch() -> None:
    with pytest.raises(ConfigError, match="backend 'nonesuch' is not registered"):
        Strategy.create("full", "nonesuch").validate()
    with pytest.raises(ConfigError, match="mode 'turbo' does not exist"):
        Strategy.create("full", "inductor", "turbo").validate()
    Strategy.create("full", "aot_eager").validate()
    Strategy.create("full", "tests.models:wrong_backend").validate()
    with pytest.raises(ConfigError, match="cannot be imported"):
        Strategy.create("full", "tests.models:nothing_here").validate()


@pytest.mark.parametrize(
    ("backend", "mode"),
    [("cudagraphs", None), ("inductor", "reduce-overhead"), ("inductor", "max-autotune")],
)
def test_cuda_only_choices_are_not_applicable_on_cpu(backend: str, mode: str | None) -> None:
    s = Strategy.create("full", backend, mode)
    assert s.needs_cuda()
    with pytest.raises(NotApplicable, match="CUDA"):
        s.check_applicable("cpu")
    assert Strategy.create("full", "inductor", "max-autotune-no-cudagraphs").needs_cuda() is None


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
    fields = strategy.to_accelerate()
    plugin = TorchDynamoPlugin(**fields)
    assert Strategy.from_accelerate(plugin) == strategy
    assert Strategy.from_accelerate(fields) == strategy


def test_nested_is_never_silently_dropped_for_accelerate() -> None:
    nested = Strategy.create("nested", "inductor")
    assert "nested" in (nested.accelerate_caveat() or "")
    with pytest.raises(NotApplicable, match="cannot express granularity 'nested'"):
        nested.to_accelerate()
    approx = nested.to_accelerate(approximate=True)
    assert approx["use_regional_compilation"] is False and approx["backend"] == "inductor"
    with pytest.raises(NotApplicable, match="DynamoBackend has no backend"):
        Strategy.create("full", "aot_eager_decomp_partition").to_accelerate()


def test_compile_kwargs() -> None:
    assert Strategy.create("none").compile_kwargs() == {}
    tuned = Strategy.create("full", "inductor", "max-autotune-no-cudagraphs", True)
    assert tuned.compile_kwargs() == {
        "backend": "inductor", "mode": "max-autotune-no-cudagraphs", "dynamic": True,
        "fullgraph": False,
    }  # fmt: skip
    assert "mode" not in Strategy.create("full", "aot_eager").compile_kwargs()
    assert callable(
        Strategy.create("full", "tests.models:wrong_backend").compile_kwargs()["backend"]
    )
