"""A continuous-batching strategy's own knobs (autotune/strategy/batching.py): one spelling, the
presets' fields, and exactly the keywords transformers' ContinuousBatchingConfig takes."""

from __future__ import annotations

import pytest
import transformers

from autotune.errors import ConfigError
from autotune.strategy import Strategy, batching


def test_batching_has_one_spelling_in_the_strategy_s_key() -> None:
    a = Strategy.create(backend="aot_eager", batching="kv=256, q=128")
    b = Strategy.create(backend="aot_eager", batching="q=128,kv=256")
    assert a == b and a.key.endswith("/batching=q=128+kv=256")
    assert Strategy.from_dict(a.to_dict()) == a
    assert "batching" not in Strategy.create(backend="aot_eager").to_dict()  # as stored before
    assert Strategy.create(granularity="none", batching="q=64").key == "none"


@pytest.mark.parametrize("level", [1, 2, 3])
def test_a_level_is_transformers_preset_with_its_compile_fields(level: int) -> None:
    s = Strategy.create(backend="aot_eager", mode=None, batching=f"level={level}")
    mode, dynamic = batching.LEVELS[level]
    assert (s.backend, s.mode, s.dynamic, s.fullgraph) == ("inductor", mode, dynamic, False)
    kwargs = batching.config_kwargs(s.batching, batching.compile_config(s))
    assert kwargs == {"auto_switch_to_flash": False, "default_compile_level": level}


BAD = ["q=0", "q=x", "speed=2", "level=4", "level=2,q=64", "q=1,q=2", "graphs=some",
       "pad=some", "pad=auto+q=32", "kv=64+pad=auto", "level=1+pad=auto"]  # fmt: skip


@pytest.mark.parametrize("text", BAD)
def test_bad_batching_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(ConfigError, match="bad batching") as got:
        Strategy.create(batching=text)
    assert "\n" not in str(got.value)


def test_the_keywords_build_transformers_own_config() -> None:
    s = Strategy.create(
        backend="aot_eager",
        dynamic=True,
        batching="q=32,kv=512,tokens=256,requests=8,graphs=decode",
    )
    kwargs = batching.config_kwargs(s.batching, batching.compile_config(s))
    config = batching.config_object(kwargs)
    assert isinstance(config, transformers.ContinuousBatchingConfig)
    assert (config.q_padding_interval_size, config.kv_padding_interval_size) == (32, 512)
    assert (config.max_batch_tokens, config.max_requests_per_batch) == (256, 8)
    assert config.use_cuda_graph == (False, True)
    for path in (config.varlen_compile_config, config.decode_compile_config):
        assert isinstance(path, transformers.CompileConfig)
        assert (path.backend, path.dynamic, path.fullgraph) == ("aot_eager", True, False)
    eager = batching.config_object(batching.eager_kwargs(s.batching))
    assert eager.varlen_compile_config is None and eager.default_compile_level == 0
    assert (eager.max_batch_tokens, eager.q_padding_interval_size) == (256, 0)


def test_the_cache_holds_every_request_and_a_warm_up_batch() -> None:
    # two requests of 70 and 300 tokens: 1 + 2 pages of 256; a warm-up batch of 512: 2 + 1
    assert batching.blocks([60, 280], [10, 20], "tokens=512") == 3 + 3
    assert batching.blocks([60], [10], "none") == 1 + 8192 // 256 + 1


def test_batching_is_the_continuous_workload_s() -> None:
    with pytest.raises(ConfigError, match="continuous workload's"):
        Strategy.create(batching="q=64").check_workload("generate")
    with pytest.raises(ConfigError, match="not its"):
        Strategy.create(buckets="pow2").check_workload("continuous")
    Strategy.create(batching="q=64").check_workload("continuous")


def test_padding_is_priced_over_eager_s_batches_as_transformers_pads() -> None:
    # four batches: a first prefill (no cache read), a prefill after it, two decode steps
    steps = [(34, 0), (21, 34), (2, 55), (1, 19)]
    found = batching.padding(steps, "q=32+kv=64", blocks=10)
    # queries 34, 21, 2, 1 padded to 64, 32, 32, 32: 160 for 58; reads to 64 + 64 (nothing
    # cached still reads one interval, as transformers' pad_to_interval pads 0), 32 + 64 x 3
    assert found["q_waste"] == pytest.approx(160 / 58 - 1)
    assert found["kv_waste"] == pytest.approx((128 + 3 * 96) / (34 + 55 + 57 + 20) - 1)
    assert (found["shapes"], found["batches"]) == (2, 4)
    capped = batching.padding(steps, "q=32+kv=64+tokens=32", blocks=1)  # at most 32, 256 read
    assert capped["q_waste"] == pytest.approx(4 * 32 / 58 - 1)
    assert batching.padding([], "q=32", blocks=10) == {}


def test_pad_auto_runs_the_intervals_chosen_for_it_and_keeps_its_key() -> None:
    s = Strategy.create(backend="eager", batching="tokens=256+pad=auto")
    assert s.key.endswith("/batching=pad=auto+tokens=256")
    with pytest.raises(ValueError, match="no intervals were chosen"):
        batching.config_kwargs(s.batching, batching.compile_config(s), s.edges)
    chosen = Strategy.from_dict({**s.to_dict(), "edges": [[16], [128]]})
    assert chosen == s and chosen.edges == ((16,), (128,))  # the choice is not in the key
    kwargs = batching.config_kwargs(chosen.batching, batching.compile_config(chosen),
                                    chosen.edges)  # fmt: skip
    assert (kwargs["q_padding_interval_size"], kwargs["kv_padding_interval_size"]) == (16, 128)
    assert kwargs["max_batch_tokens"] == 256
    assert Strategy.create(backend="eager", batching="q=16", edges=[[16], [128]]).edges is None
