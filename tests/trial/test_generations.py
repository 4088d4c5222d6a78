"""The generate workload over a traffic (autotune/trial/scenarios/generations.py): prompts and
answers of many lengths read as logs spell them, each request a whole greedy generation against
one static cache sized for the traffic, and the graphs each request compiled equal to what a
plain ``generate`` loop over the same traffic compiles, counted by Dynamo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autotune.catalog import ModelRef
from autotune.errors import ConfigError
from autotune.strategy import Strategy
from autotune.workload import Settings, Workload

LLAMA = ModelRef("tests.models:tiny_llama")
QUICK = Settings(iters=4, warmup=1, starts=("cold",), timeout_s=300)
SPREAD = {"kind": "generate", "seq_len": "8..48", "new_tokens": "4..16", "requests": 12}


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [("seq_len", "new_tokens"), ("prompt_tokens", "completion_tokens"),
     ("prompt_len", "output_len"), ("input_len", "output_tokens")],
)  # fmt: skip
def test_a_generate_traffic_reads_each_spelling_of_a_log(prompt: str, answer: str,
                                                         tmp_path: Path) -> None:  # fmt: skip
    rows = [(12, 5), (30, 9), (12, 3)]
    csv = tmp_path / "log.csv"
    csv.write_text(f"{prompt},{answer}\n" + "".join(f"{p},{a}\n" for p, a in rows))
    lines = tmp_path / "log.jsonl"
    lines.write_text("".join(json.dumps({prompt: p, answer: a, "batch_size": 1}) + "\n"
                             for p, a in rows))  # fmt: skip
    for path in (csv, lines):
        w = Workload(kind="generate", traffic=str(path))
        assert w.traffic == ((1, 12), (1, 30), (1, 12)) and w.answers == (5, 9, 3)
        assert w.cache_len == 39 and Workload.from_dict(w.to_dict()) == w
    inference = Workload(traffic=str(csv))  # the answers are the generate workload's alone
    assert inference.traffic == ((1, 12), (1, 30), (1, 12)) and inference.answers == ()


def test_bad_answers_are_refused_in_one_line(tmp_path: Path) -> None:
    gap = tmp_path / "gap.jsonl"
    gap.write_text('{"seq_len": 8, "new_tokens": 4}\n{"seq_len": 9}\n')
    with pytest.raises(ConfigError, match="request 2: no new_tokens"):
        Workload(kind="generate", traffic=str(gap))
    one = tmp_path / "one.csv"
    one.write_text("prompt_tokens,output_tokens\n8,4\n9,1\n")
    with pytest.raises(
        ConfigError, match="line 3: output_tokens = 1, expected a whole number of at least 2"
    ):
        Workload(kind="generate", traffic=str(one))
    with pytest.raises(ConfigError, match="--new-tokens is the generate workload's"):
        Workload(seq_len="8..16", new_tokens="4..8")


def test_short_forms_draw_prompts_and_answers_seeded() -> None:
    w, again = Workload(**SPREAD), Workload(**SPREAD)
    assert w == again and len(w.traffic) == len(w.answers) == 12
    assert all(8 <= s <= 48 for _, s in w.traffic) and all(4 <= n <= 16 for n in w.answers)
    assert w.cache_len == max(s + n for (_, s), n in zip(w.traffic, w.answers, strict=True))
    assert len(set(w.answers)) > 1


def plain_generate_loop(workload: Workload, strategy: Strategy) -> list[int]:
    """What a user writes to serve the traffic: the exported strategy through
    ``autotune.apply_generation``, its static cache sized for the traffic
    (``max_cache_len``), one ``generate`` a request; the graphs each compiled, by Dynamo."""
    import autotune
    from autotune.trial import metrics
    from tests import models

    torch._dynamo.reset()
    model, _ = models.tiny_llama()
    gen = autotune.apply_generation(model, strategy)
    gen.generation_config.max_cache_len = workload.cache_len
    compiled = []
    for (batch, seq), n in zip(workload.traffic, workload.answers, strict=True):
        ids = models.tiny_llama.make_inputs(batch, seq)[0]
        before = metrics.compile_counts()[0]
        with torch.no_grad():
            out = gen.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        assert out.shape[1] == seq + n
        compiled.append(metrics.compile_counts()[0] - before)
    return compiled


@pytest.mark.slow
def test_a_generate_traffic_trial_counts_what_a_plain_generate_loop_counts() -> None:
    from autotune.trial.parent import measure

    w, strategy = Workload(**SPREAD), Strategy.create("full", "aot_eager")
    m = measure(LLAMA, w, strategy, QUICK)
    assert m.ok and m.traffic is not None, m.reason
    t = m.traffic
    assert t["compiles"] == plain_generate_loop(w, strategy)
    assert sum(t["compiles"]) >= 2 and t["cache_len"] == w.cache_len
    assert t["played"] == [n for n, s in enumerate(w.traffic, 1) if s not in w.traffic[: n - 1]]
    assert m.accuracy.passed and m.tokens.passed, (m.accuracy.detail, m.tokens.detail)
    assert len(t["ttft_ms"]) == len(t["tpot_ms"]) == len(t["stall_ms"]) == 12
    assert all(s == 0 for s, c in zip(t["stall_ms"], t["compiles"], strict=True) if not c)
    assert t["ready_s"] == pytest.approx(t["eager_ready_s"] + sum(t["stall_ms"]) / 1e3)
    assert m.latency is not None and m.ttft is not None and t["weighted"]["tpot_ms"] > 0


@pytest.mark.slow
def test_a_decode_perturbing_backend_fails_the_gate_over_a_generate_traffic() -> None:
    from autotune.trial.parent import measure

    wrong = Strategy.create("full", "tests.models:decode_perturbing_backend")
    m = measure(LLAMA, Workload(**SPREAD), wrong, QUICK)
    assert m.ok and m.accuracy is not None
    assert not m.accuracy.passed and "request 1" in m.accuracy.detail, m.accuracy.detail
