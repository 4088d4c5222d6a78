"""A generation timed as a user's loop times it (autotune/trial/scenarios/served.py): one
``model.generate`` call, each token stamped as it arrives; the trial's sides run through it."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

import autotune
from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.parent import Settings, measure
from autotune.workload import Workload
from tests import models
from tests.trial.test_generate import TINY

TINY_EOS = ModelRef("tests.models:tiny_llama_eos")

GEN = Workload(batch_size=2, seq_len=8, kind="generate", new_tokens=6)


def served() -> Any:
    return importlib.import_module("autotune.trial.scenarios.served")


class Counted:
    """The forwards a model ran, counted by a hook torch calls on every module call."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls: list[int] = []
        model.register_forward_hook(lambda m, args, kwargs, out: self.calls.append(
            kwargs["input_ids"].shape[1]), with_kwargs=True)  # fmt: skip


def test_a_served_generation_is_one_generate_call_timed_token_by_token() -> None:
    """Its tokens are ``model.generate``'s own; the model ran one prefill and N - 1 decode
    steps, as ``generate`` calls it (the hook counts them); TTFT and N - 1 gaps come back."""
    from autotune.trial.scenarios.generate import new_cache

    model, (prompt,) = models.tiny_llama()
    counted = Counted(model)
    run = served().run(model, prompt, 6, "cpu", logits=True)
    assert counted.calls == [8, 1, 1, 1, 1, 1]  # the prefill, then a token a step
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                  max_new_tokens=6, min_new_tokens=6, do_sample=False)  # fmt: skip
    assert torch.equal(run.tokens, expected[:, 8:])
    assert run.prefill_s > 0 and len(run.steps_s) == 5 and all(s > 0 for s in run.steps_s)
    assert run.prefill_logits.shape == (2, models.TINY_LLAMA["vocab_size"])
    assert len(run.margins) == 6 and run.first_logits is not None
    cache = new_cache(model, GEN)  # a static cache, reset in place before each call
    for _ in range(2):
        again = served().run(model, prompt, 6, "cpu", cache=cache)
        assert torch.equal(again.tokens, run.tokens) and cache.get_seq_length() == 13


def test_only_a_model_whose_own_generate_runs_it_is_served_through_generate() -> None:
    model, _ = models.tiny_llama()
    assert served().generates(model)
    assert served().generates(autotune.apply_generation(model, Strategy.create("full", "eager")))
    assert not served().generates(torch.compile(model, backend="eager"))  # generate: uncompiled
    assert not served().generates(model.forward)


def test_a_generate_trial_times_eager_as_a_plain_user_runs_it_and_a_static_cache_beside() -> None:
    """Speedups are against eager's ``generate`` with its own cache; eager on the compiled
    side's static cache is timed in the same rounds and shown beside (``eager_static``)."""
    settings = Settings(iters=3, warmup=1, timeout_s=300)
    m = measure(TINY, GEN, Strategy.create("full", "aot_eager"), settings)
    assert m.status == "ok", m.reason + m.log_tail
    assert m.eager_latency and m.latency and m.eager_ttft and m.ttft
    assert set(m.eager_static) == {"tpot_ms", "ttft_ms", "tokens_per_s"}
    assert m.eager_static["tpot_ms"] > 0 and m.eager_static["tpot_ms"] != m.eager_latency.median_ms
    assert m.speedup == m.eager_latency.median_ms / m.latency.median_ms
    from autotune.cli.traffic_lines import static_line

    (line,) = static_line(m)
    assert line.startswith("eager      model.generate with its default cache; on a static cache")


def decoding(**kwargs: Any) -> Any:
    return served().Decoding(**kwargs)


def plain(model: torch.nn.Module, prompt: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """What a user's loop gets from ``generate`` with these keywords: the new tokens."""
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)
    return out[:, prompt.shape[1] :]


def test_an_answer_ends_where_generate_ends_it_with_eos_and_goes_on_by_length() -> None:
    """``stop=eos``: the tokens and the forwards of a plain ``generate(max_new_tokens=20)``,
    which stops once every row has met an end-of-sequence token (13 here); ``length``: all 20,
    as the traffic's rows say (``generate`` masks the end tokens until then)."""
    model, (prompt,) = models.tiny_llama_eos()
    counted = Counted(model)
    ends = served().run(model, prompt, 20, "cpu", decoding=decoding(stop="eos"))
    assert len(counted.calls) == ends.tokens.shape[1] == len(ends.steps_s) + 1
    expected = plain(model, prompt, max_new_tokens=20, do_sample=False)
    assert torch.equal(ends.tokens, expected) and 2 < ends.tokens.shape[1] < 20
    whole = served().run(model, prompt, 20, "cpu", decoding=decoding(stop="length"))
    assert whole.tokens.shape[1] == 20  # min_new_tokens masks the end tokens till then:
    assert torch.equal(whole.tokens[:, :5], ends.tokens[:, :5])  # the same up to the first


def test_sampled_answers_draw_as_generate_draws_seeded_alike_and_are_judged_greedy() -> None:
    """``sampling=sample``: ``generate(do_sample=True)`` after ``torch.manual_seed(seed)``,
    the same draws on every call; a judged generation (its logits asked for) stays greedy."""
    model, (prompt,) = models.tiny_llama()
    d = decoding(sampling="sample", seed=3)
    drawn = served().run(model, prompt, 12, "cpu", decoding=d)
    torch.manual_seed(3)
    expected = plain(model, prompt, max_new_tokens=12, min_new_tokens=12, do_sample=True)
    greedy = plain(model, prompt, max_new_tokens=12, min_new_tokens=12, do_sample=False)
    assert torch.equal(drawn.tokens, expected) and not torch.equal(drawn.tokens, greedy)
    assert torch.equal(served().run(model, prompt, 12, "cpu", decoding=d).tokens, drawn.tokens)
    judged = served().run(model, prompt, 12, "cpu", logits=True, decoding=d)
    assert torch.equal(judged.tokens, greedy)
    assert d.samples(model) and not decoding(sampling="model").samples(model)
    model.generation_config.do_sample = True  # a checkpoint that samples: as its config says
    assert decoding(sampling="model").samples(model)


def test_eos_is_refused_in_one_line_where_the_model_names_no_end_token() -> None:
    from autotune.errors import ConfigError

    model, _ = models.tiny_llama()
    served().check_stops(model, decoding(stop="eos"))  # eos_token_id 2: it may stop
    model.generation_config.eos_token_id = None
    served().check_stops(model, decoding(stop="length"))
    with pytest.raises(ConfigError, match="names no eos_token_id"):
        served().check_stops(model, decoding(stop="eos"))


def test_an_answer_that_ends_sooner_than_eager_s_differs_where_eager_s_goes_on() -> None:
    from autotune.trial.scenarios.generate import check_tokens

    eager = torch.tensor([[5, 6, 7, 8]])
    assert check_tokens(eager, eager.clone()).passed
    short = check_tokens(eager, eager[:, :2])
    assert not short.passed and short.matched == 2
    assert "eager's answer is 4 tokens, this one 2" in short.detail


@pytest.mark.slow
def test_a_generate_trial_that_stops_at_eos_times_the_answers_as_they_end() -> None:
    """The tokens checked are the answer up to where it ended (13 of at most 16)."""
    w = Workload(batch_size=2, seq_len=8, kind="generate", new_tokens=16, stop="eos")
    settings = Settings(iters=3, warmup=1, timeout_s=300)
    m = measure(TINY_EOS, w, Strategy.create("full", "aot_eager"), settings)
    assert m.status == "ok", m.reason + m.log_tail
    assert m.tokens is not None and m.tokens.passed and m.tokens.tokens == 13
    assert m.eager_tokens_per_s is not None and m.eager_ttft is not None


def test_tokens_a_second_count_each_answer_where_it_ended() -> None:
    """An answer that ended at 13 of at most 16 tokens counts 13, a row of the batch each."""
    ended = served().Run(torch.zeros(2, 13), 0.004, [0.001] * 12)  # 16 ms in all
    whole = served().Run(torch.zeros(2, 16), 0.004, [0.001] * 15)  # 19 ms
    assert served().tokens_per_s([ended], 2) == pytest.approx(2 * 13 / 0.016)
    assert served().tokens_per_s([whole, ended, whole], 2) == pytest.approx(2 * 16 / 0.019)


@pytest.mark.slow
def test_a_sampled_generate_trial_is_judged_greedy_and_timed_sampled() -> None:
    w = Workload(batch_size=2, seq_len=8, kind="generate", new_tokens=6, sampling="sample")
    m = measure(TINY, w, Strategy.create("full", "aot_eager"), Settings(iters=3, warmup=1))
    assert m.status == "ok", m.reason + m.log_tail
    assert m.tokens is not None and m.tokens.passed and m.tokens.tokens == 6
    assert m.latency is not None and m.speedup is not None


def test_stop_and_sampling_are_the_generate_workload_s_and_name_their_study() -> None:
    from autotune.errors import ConfigError

    with pytest.raises(ConfigError, match="generate workload's"):
        Workload(kind="inference", stop="eos")
    with pytest.raises(ConfigError, match="one of greedy, sample, model"):
        Workload(kind="generate", sampling="beam")
    w = Workload(kind="generate", stop="eos", sampling="sample")
    assert "-eos-sample-" in w.slug() and "-eos" not in Workload(kind="generate").slug()
    assert Workload.from_dict(w.to_dict()) == w
    assert "stop" not in Workload(kind="generate").to_dict()  # stored as before
    from autotune.workload import describe

    assert describe(w).endswith("32 new tokens · answers end at eos · sample sampling")
