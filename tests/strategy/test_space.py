from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.errors import ConfigError
from autotune.fields import parse_duration, parse_memory
from autotune.search.spec import StudySpec
from autotune.strategy import Strategy
from autotune.strategy.space import Space


def test_default_space_on_cpu_covers_what_torch_supports_and_no_more() -> None:
    space = Space.default("cpu")
    assert space.granularity == ("none", "full", "regional", "nested")
    assert {"inductor", "aot_eager", "eager"} <= set(space.backend)
    assert "cudagraphs" not in space.backend
    assert "reduce-overhead" not in space.mode and "max-autotune" not in space.mode
    assert "default" in space.mode and "max-autotune-no-cudagraphs" in space.mode
    members = space.validate("cpu")
    keys = [s.key for s in members]
    assert len(keys) == len(set(keys)) and "none" in keys
    assert space.options == ("freezing", "cpp_wrapper", "max_autotune")  # no cudagraphs on CPU
    plain = space.narrow(options="none")
    assert len(plain.validate("cpu")) == 1 + 3 * (len(space.mode) + len(space.backend) - 1) * 3 * 2
    # each mode takes freezing and cpp_wrapper on or off; max_autotune under default only, where
    # it is max-autotune-no-cudagraphs again (one strategy, not two)
    per_cell = len(space.mode) * 4 + len(space.backend) - 1
    assert len(keys) == 1 + 3 * per_cell * 3 * 2
    assert sum(k.endswith("/freezing+cpp_wrapper") for k in keys) == 3 * len(space.mode) * 3 * 2
    assert Space.default("cpu", "train").options == ("cpp_wrapper", "max_autotune")


def test_options_narrow_resume_and_refuse_train_freezing() -> None:
    space = Space.default("cpu").narrow(
        granularity="full", backend="inductor", mode="default", dynamic="none",
        fullgraph="false", options="freezing,cpp_wrapper",
    )  # fmt: skip
    assert [s.key for s in space.strategies()] == [
        "full/inductor/default/dynamic=auto/breaks-ok",
        "full/inductor/default/dynamic=auto/breaks-ok/freezing",
        "full/inductor/default/dynamic=auto/breaks-ok/cpp_wrapper",
        "full/inductor/default/dynamic=auto/breaks-ok/freezing+cpp_wrapper",
    ]
    assert Space.from_dict(space.to_dict()) == space
    assert Space.from_dict({"granularity": ["full"]}).options == ()  # an older spec: none
    assert space.contains(space.narrow(options="freezing"))
    assert not space.narrow(options="none").contains(space)
    with pytest.raises(ConfigError, match="unknown option 'fast'"):
        space.narrow(options="fast").validate("cpu")
    with pytest.raises(ConfigError, match="option cudagraphs records CUDA graphs"):
        space.narrow(options="cudagraphs").validate("cpu")
    with pytest.raises(ConfigError, match="not train"):
        StudySpec.from_sources(model="toy-64", workload="train", options="freezing")
    spec = StudySpec.from_sources(model="toy-64", workload="train")
    assert "freezing" not in spec.space.options


def test_narrowing_and_canonical_members() -> None:
    space = Space.default("cpu").narrow(
        granularity="full,regional", backend="eager", dynamic="none", fullgraph="false"
    )
    assert [s.key for s in space.strategies()] == [
        "full/eager/-/dynamic=auto/breaks-ok",
        "regional/eager/-/dynamic=auto/breaks-ok",
    ]
    with pytest.raises(ConfigError, match="unknown space key"):
        Space().narrow(flavour="x")
    with pytest.raises(ConfigError, match="bad fullgraph value"):
        Space().narrow(fullgraph="sometimes")


def test_suggest_and_params_agree() -> None:
    space = Space.default("cpu")
    study = optuna.create_study(directions=["minimize", "minimize"])
    for s in space.strategies():
        study.enqueue_trial(space.params(s))
    for s in space.strategies():
        trial = study.ask()
        assert space.suggest(trial) == s
        study.tell(trial, [0.0, 0.0])


def test_spec_file_and_flags(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(
        '[model]\nname = "toy-64"\nlayers = 8\n[workload]\ndtype = "float32"\n'
        '[space]\nbackend = ["eager"]\ndynamic = ["none", false]\n'
        '[search]\ntrials = 7\ntime_budget = "1h30m"\nmax_memory = "2GiB"\nseed = 3\n'
    )
    spec = StudySpec.from_sources(str(toml), device="cpu", trials=4)
    assert spec.trials == 4 and spec.time_budget_s == 5400 and spec.max_memory_mb == 2048
    assert spec.model.layers == 8 and spec.model.seed == 3 and spec.settings.seed == 3
    assert spec.space.backend == ("eager",) and spec.space.dynamic == (None, False)
    assert StudySpec.from_dict(spec.to_dict()) == spec
    name = spec.study_name({"device_name": "AMD EPYC 7B13", "torch": "2.13.0+cpu"})
    assert name == "toy-64-l8-s3-inference-b1-s32-float32-cpu-amd-epyc-7b13-torch2.13.0-cpu"


SPECS = sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.toml"))


def test_the_committed_specs_are_found() -> None:
    assert len(SPECS) >= 2  # collected wherever pytest runs from, not from the working folder


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_committed_specs_load(path: Path) -> None:
    spec = StudySpec.from_sources(str(path), device="cpu")
    assert spec.space.validate("cpu")


def test_durations_and_sizes() -> None:
    assert parse_duration("30m") == 1800 and parse_duration("2h") == 7200
    assert parse_duration("90") == 90 and parse_memory("512MiB") == 512
    with pytest.raises(ConfigError):
        parse_duration("soon")
    with pytest.raises(ConfigError):
        parse_memory("lots")


def test_strategy_from_space_is_canonical() -> None:
    members = Space.default("cpu").strategies()
    assert all(Strategy.from_dict(s.to_dict()) == s and Strategy(**s.to_dict()) == s
               for s in members)  # fmt: skip
    assert len({s.key for s in members}) == len(members)
    assert Strategy.create("none") in Space.default("cpu").strategies()


def test_a_generate_workload_opens_the_prefill_and_inference_does_not() -> None:
    generate, inference = Space.default("cpu", "generate"), Space.default("cpu")
    assert generate.prefill == ("compiled", "eager") and "prefill" in generate.dimensions
    assert inference.prefill == ("compiled",) and "prefill" not in inference.dimensions
    members = generate.strategies()
    assert {s.prefill for s in members if s.granularity != "none"} == {"compiled", "eager"}
    assert "prefill" not in inference.to_dict() and Space.from_dict(generate.to_dict()) == generate
    assert generate.narrow(prefill="eager").prefill == ("eager",)
    with pytest.raises(ConfigError, match=r"bad prefill \['later'\]: use compiled, eager"):
        generate.narrow(prefill="later")


def test_a_generate_traffic_opens_a_cache_a_bucket_and_prefill_buckets() -> None:
    requests = ((1, 8), (1, 16), (1, 8))
    generate = Space.default("cpu", "generate").for_traffic(requests, "generate")
    assert generate.kv_cache == ("single", "pow2", "quantiles")
    assert generate.buckets == ("none", "pow2", "quantiles")  # its prefill's: no auto, no marks
    assert generate.marks == ("none",) and generate.stance == ("default",)
    assert Space.default("cpu").for_traffic(requests).kv_cache == ("single",)
    assert Space.default("cpu", "generate").for_traffic(((1, 8),), "generate").kv_cache == (
        "single",)  # fmt: skip


def test_every_member_s_trial_parameters_name_it_again() -> None:
    """``default`` with the ``max_autotune`` switch is ``max-autotune-no-cudagraphs``, a mode a
    space of ``--mode default`` does not list: its parameters named ``default`` without the
    switch, another (measured) strategy, and a search that proposed it repeated that one
    11,025 times until its budget ran out. Now each member's parameters read back as it."""
    from autotune.search.spec import StudySpec

    spec = StudySpec.from_sources(None, model="toy-64", backend="inductor", granularity="full",
                                  mode="default")  # fmt: skip
    space = spec.space
    members = space.strategies()
    assert any(s.mode == "max-autotune-no-cudagraphs" for s in members)  # the case is there

    def read_back(params: dict) -> str:  # as Space.suggest reads a trial's parameters
        on = [n for n in space.options if params[n]]
        return Strategy.create(**{n: params[n] for n in space.dimensions}, options=on).key

    def listed(params: dict) -> bool:  # Optuna takes only the values its distributions list
        return all(params[n] in getattr(space, n) for n in space.dimensions)

    assert [s.key for s in members if not listed(space.params(s))] == []
    assert [s.key for s in members if read_back(space.params(s)) != s.key] == []
