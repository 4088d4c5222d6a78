from __future__ import annotations

import pytest
import torch

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
    with pytest.raises(ConfigError, match=r"module tests\.models has no 'nothing_here'"):
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


def test_compile_kwargs() -> None:
    assert Strategy.create("none").compile_kwargs() == {}
    tuned = Strategy.create("full", "inductor", "max-autotune-no-cudagraphs", True)
    assert tuned.compile_kwargs() == {
        "backend": "inductor", "dynamic": True, "fullgraph": False,
        "options": {"max_autotune": True, "coordinate_descent_tuning": True},
    }  # fmt: skip
    assert "mode" not in Strategy.create("full", "aot_eager").compile_kwargs()
    assert callable(
        Strategy.create("full", "tests.models:wrong_backend").compile_kwargs()["backend"]
    )


def test_a_mode_expands_into_options_and_two_spellings_are_one_key() -> None:
    spelled = Strategy.create("full", "inductor", "default", None, False, ["max_autotune"])
    named = Strategy.create("full", "inductor", "max-autotune-no-cudagraphs")
    assert spelled == named and spelled.key == named.key
    assert named.key == "full/inductor/max-autotune-no-cudagraphs/dynamic=auto/breaks-ok"
    implied = Strategy.create("full", "inductor", "max-autotune-no-cudagraphs", None, False,
                              ["max_autotune", "freezing"])  # fmt: skip
    assert implied.options == ("freezing",)
    assert implied.key.endswith("/breaks-ok/freezing")
    order = Strategy.create(
        "full", "inductor", "default", None, False, ["cpp_wrapper", "freezing"]
    )
    assert order.key == Strategy.create(
        "full", "inductor", "default", None, False, ["freezing", "cpp_wrapper", "freezing"]
    ).key  # fmt: skip
    assert order.compile_kwargs()["options"] == {"freezing": True, "cpp_wrapper": True}
    # the options of a mode are exactly torch's bundle, merged with the switches
    lite = Strategy.create("full", "inductor", "lite", None, False, ["freezing"])
    assert lite.compile_kwargs()["options"] == {
        **torch._inductor.list_mode_options("lite"),
        "freezing": True,
    }
    # switches belong to inductor only, and max_autotune to the default mode only
    assert Strategy.create("full", "eager", None, None, False, ["freezing"]).options == ()
    assert Strategy.create("full", "inductor", "lite", None, False, ["max_autotune"]).options == ()
    with pytest.raises(ConfigError, match="unknown option 'fast'"):
        Strategy.create("full", "inductor", "default", None, False, ["fast"])
    # older stored strategies (no options) read back to the same key
    old = {"granularity": "full", "backend": "inductor", "mode": "default", "dynamic": None,
           "fullgraph": False}  # fmt: skip
    assert Strategy.from_dict(old).key == "full/inductor/default/dynamic=auto/breaks-ok"


def test_mode_is_never_passed_with_options_and_torch_takes_the_kwargs() -> None:
    from autotune.strategy.space import Space

    space = Space.default("cuda")  # CUDA's modes and switches too; nothing is compiled here
    assert "cudagraphs" in space.options
    for s in space.strategies():
        kwargs = s.compile_kwargs()
        assert "mode" not in kwargs, s.key
        assert ("options" in kwargs) == (s.backend == "inductor"), s.key
    model = torch.nn.Linear(4, 4)
    with pytest.raises(RuntimeError, match="Either mode or options"):
        torch.compile(model, mode="max-autotune-no-cudagraphs", options={"freezing": True})
    s = Strategy.create(
        "full", "inductor", "max-autotune-no-cudagraphs", None, False, ["freezing"]
    )
    torch.compile(model, **s.compile_kwargs())  # accepted (compiling happens on the first call)


def test_the_cudagraphs_option_is_cuda_only_and_marks_steps() -> None:
    reduce = Strategy.create("full", "inductor", "default", None, False, ["cudagraphs"])
    assert reduce.key == Strategy.create("full", "inductor", "reduce-overhead").key
    lite = Strategy.create("regional", "inductor", "lite", None, False, ["cudagraphs"])
    assert lite.options == ("cudagraphs",) and lite.uses_cuda_graphs()
    assert "option cudagraphs" in (lite.needs_cuda() or "")
    with pytest.raises(NotApplicable, match="not applicable on cpu"):
        lite.check_applicable("cpu")
    lite.check_applicable("cuda:1")  # any CUDA device string
    assert lite.compile_kwargs()["options"]["triton.cudagraphs"] is True


def test_the_builtin_backends_and_modes_are_torch_s() -> None:
    """A backend or mode among the built-in names is known without importing Dynamo; each of
    them must be one the running torch registers, and a name it does not know is refused."""
    from autotune.strategy import BUILTIN_BACKENDS, is_registered, registered_backends
    from autotune.strategy.inductor import BUILTIN_MODES, inductor_modes, is_mode

    assert set(BUILTIN_BACKENDS) <= set(registered_backends())
    assert set(BUILTIN_MODES) == set(inductor_modes())  # a new mode of torch's fails here
    assert is_registered("eager") and not is_registered("no-such-backend")
    assert is_mode("default") and not is_mode("no-such-mode")
    with pytest.raises(ConfigError, match="no-such-mode"):
        Strategy("full", "inductor", mode="no-such-mode").validate()


def test_prefill_is_a_field_left_out_of_keys_and_dicts_at_its_default() -> None:
    eager_prefill = Strategy.create("full", "aot_eager", prefill="eager")
    assert eager_prefill.key == "full/aot_eager/-/dynamic=auto/breaks-ok/prefill=eager"
    assert Strategy.from_dict(eager_prefill.to_dict()) == eager_prefill
    plain = Strategy.create("full", "aot_eager")
    assert "prefill" not in plain.key and "prefill" not in plain.to_dict()
    assert Strategy.from_dict(plain.to_dict()) == plain != eager_prefill
    assert Strategy.create("none", prefill="eager") == Strategy.create("none")  # nothing compiles
    with pytest.raises(ConfigError, match="bad prefill 'lazy': use one of compiled, eager"):
        Strategy.create("full", prefill="lazy")
