"""The generate workload over a traffic (autotune/trial/scenarios/generations.py): prompts and
answers of many lengths read as logs spell them, each request a whole greedy generation against
one static cache sized for the traffic, and the graphs each request compiled equal to what a
plain ``generate`` loop over the same traffic compiles, counted by Dynamo. A length that a later
dynamic prefill took over is played again where it records, no later arrival's TTFT holds a
recording, and each side's peak memory leaves out the other sides' caches and eager's calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autotune.catalog import ModelRef
from autotune.errors import ConfigError
from autotune.strategy import Strategy, kv_cache
from autotune.trial.request import Request
from autotune.trial.scenarios import begin
from autotune.trial.scenarios.generations import Generations
from autotune.workload import Settings, Workload
from tests.models import RECORD_S, TINY_LLAMA

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
    with pytest.raises(
        ConfigError, match="--new-tokens is the generate and continuous workloads'"
    ):
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


def generated(prompts: list[int], strategy: Strategy, model: str = "tiny_llama",
              answer: int = 4) -> Generations:  # fmt: skip
    """A generate traffic's trial (each prompt one request of ``answer`` tokens), run in this
    process so that a test can watch it."""
    torch._dynamo.reset()
    w = Workload(kind="generate", traffic=tuple((1, p) for p in prompts),
                 answers=(answer,) * len(prompts))  # fmt: skip
    few = Settings(iters=2, warmup=1, starts=("cold",), timeout_s=300)
    request = Request.trial(ModelRef(f"tests.models:{model}"), w, strategy, few)
    scenario = Generations(begin(request))
    scenario.run()
    return scenario


@pytest.mark.slow
def test_a_length_a_later_dynamic_prefill_took_over_records_there_and_ttft_holds_none() -> None:
    """Prompt 8 compiles a static prefill, prompt 16 a dynamic one, which Dynamo then looks up
    first: request 3 (prompt 8 again) warms it up and records it at 8, as a server would, a
    stall the first pass missed. And a later arrival's TTFT came from the repeat whose prefill
    recorded its graph: each later arrival now stands at a call that recorded nothing. The
    backend records as CUDA-graph trees do, at a graph's second call at each set of sizes."""
    from autotune.cli.traffic_lines import traffic_lines

    recording = Strategy.create("full", "tests.models:recording_backend")
    m = generated([8, 16, 8, 8], recording).ctx.result
    t = m.traffic
    assert max(t["ttft_ms"][2:]) < RECORD_S * 1e3, t["ttft_ms"]
    # 1: the decode step's and the prefill's; 2: the dynamic prefill's; 3: its recording at 8
    assert t["recorded"] == [2, 1, 1, 0] and t["stalls"] == 3
    assert t["stall_ms"][2] >= RECORD_S * 1e3 - t["eager_first_ms"][2] and t["stall_ms"][3] == 0
    assert t["moved"] == [3] and "requests 3 ran another graph" in "\n".join(traffic_lines(m))


@pytest.mark.slow
def test_each_side_s_peak_leaves_out_the_other_sides_caches() -> None:
    """One process holds every side's caches while each side's peak is read: eager's held every
    bucket's cache, and a cache a bucket eager static's full-length one. (The first calls' peak
    is read over the compiled side's parts only, but on a CPU it is the process's resident
    high-water mark, which a compile's own memory moves by gigabytes from one run to another:
    3.1 GiB in one CI run, under eager's 0.9 in others; so it is not asserted here.)"""
    buckets = Strategy.create("full", "eager", kv_cache="pow2")
    scenario = generated([8, 40], buckets, "heavy_eager_prefill")
    m = scenario.ctx.result
    assert m.memory is not None and m.memory.eager_peak_mb > 0
    caches = {side: [kv_cache.cache_mb(c) for c in held]
              for side, held in scenario.held_caches().items()}  # fmt: skip
    per_position = 2 * 2 * TINY_LLAMA["num_key_value_heads"] * 16 * 4 / 2**20  # K, V: 2 layers
    assert sorted(caches["compiled"]) == [16 * per_position, 64 * per_position]  # two buckets
    assert caches["static"] == [44 * per_position] and caches["eager"] == []
    assert scenario.others_mb("eager") == sum(caches["compiled"]) + sum(caches["static"])
    assert scenario.others_mb("compiled") == sum(caches["static"])
