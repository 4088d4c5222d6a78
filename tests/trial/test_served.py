"""A generation timed as a user's loop times it (autotune/trial/scenarios/served.py): one
``model.generate`` call, each token stamped as it arrives; the trial's sides run through it."""

from __future__ import annotations

import importlib
from typing import Any

import torch

import autotune
from autotune.strategy import Strategy
from autotune.trial.parent import Settings, measure
from autotune.workload import Workload
from tests import models
from tests.trial.test_generate import TINY

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
