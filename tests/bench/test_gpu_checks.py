"""The GPU acceptance run's checks (bench/gpu.py) can fail, on a CPU: each verdict is fed what a
GPU run would hand it, a case that passes and one that fails; the run splits into parts that fit
a lent machine; a whole run in one process counts only its own graphs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.measurement import Graphs, Measurement
from autotune.workload import Workload
from tests.bench.test_gpu_portable import ROOT, bench

gpu = bench()
OVERHEAD = Strategy.create("full", "inductor", "reduce-overhead")


def measured(skips: int | None) -> Measurement:
    """A CUDA-graph trial whose compiled graphs lost ``skips`` of their CUDA graphs (None: no
    graphs reading at all)."""
    strategy = Strategy.create("full", "inductor", "reduce-overhead")
    m = Measurement(strategy.to_dict(), ModelRef("toy-64").to_dict(), {}, "ok")
    if skips is not None:
        m.graphs = Graphs(count=2, breaks=0, recompiles=0, cudagraph_skips=skips,
                          cudagraph_skip_reason="skipping cudagraphs due to mutated inputs"
                          if skips else "")  # fmt: skip
    return m


def test_the_generate_and_traffic_checks_fail_on_a_cuda_graph_fallback() -> None:
    """Checks 4 and 10 never read the skips: a reduce-overhead generate or traffic that ran as
    plain Inductor passed them."""
    assert gpu.graphs_lost(measured(0)) == (0, "")
    lost, why = gpu.graphs_lost(measured(1))
    assert lost == 1 and "mutated inputs" in why
    assert gpu.graphs_lost(measured(None))[0] == 1  # no reading is no proof of graphs


def test_check_3_states_accelerate_s_comparison_and_fails_where_regional_is_slower() -> None:
    here = {"none": {"compile_s": 0.0, "latency_ms": 19.69},
            "full": {"compile_s": 23.21, "latency_ms": 5.29},
            "regional": {"compile_s": 6.99, "latency_ms": 8.54}}  # fmt: skip
    figures = gpu.beside_accelerate(here)
    assert figures["regional_compiles_quicker"] == pytest.approx(23.21 / 6.99)
    assert figures["accelerate_regional_compiles_quicker"] == pytest.approx(10.7 / 1.95)
    assert figures["full_speedup"] == pytest.approx(19.69 / 5.29)
    line = gpu.beside_accelerate_line(figures)
    assert line.startswith("PASS") and "3.3x quicker than full (theirs 5.5x)" in line, line
    slower = {**here, "regional": {"compile_s": 30.0, "latency_ms": 8.54}}
    assert gpu.beside_accelerate_line(gpu.beside_accelerate(slower)).startswith("FAIL")


def test_check_11_s_margin_holds_a_segment_more_and_still_sees_the_pool() -> None:
    """Check 11 allowed exactly 2.0 MiB and read exactly 2.0 MiB (1336 against 1338)."""
    margin = gpu.same_mb(1336, 1338)
    assert margin >= 1340 - 1336  # one more small segment under another driver
    assert 2 * margin < 200  # the old reading, eager's peak with the 200 MiB pool, still fails


def test_the_children_of_checks_8_and_9_use_the_storage_check_9_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Check 9 reads ``studies/autotune.db`` in its folder; a ``$AUTOTUNE_STUDIES`` passed
    through put the search's study elsewhere, and it counted 0 workers."""
    monkeypatch.setenv("AUTOTUNE_STUDIES", "/elsewhere")
    monkeypatch.setenv("AUTOTUNE_STORAGE", "sqlite:////elsewhere/x.db")
    monkeypatch.setenv("PYTHONPATH", "/carried/site")
    env = gpu._env(EXTRA="1")
    assert "AUTOTUNE_STUDIES" not in env and "AUTOTUNE_STORAGE" not in env
    assert env["PYTHONPATH"].split(":") == [str(ROOT), "/carried/site"]  # nothing dropped
    assert env["EXTRA"] == "1"


def test_each_part_fits_a_lent_machine_s_call_two_a_lease_what_changed_first() -> None:
    """The lease's plan: what changed since the last lent GPU first (the probe, checks 13 and
    6, the padded prefill with a cache a bucket, --buckets auto), in calls of at most 9
    minutes, two within a 15-minute lease that counts the machine's start."""
    checks = gpu.plan()
    assert [n for n, _ in checks] == list(range(17))  # the probe is check 0
    for gpus in (1, 2):
        split = gpu.parts(checks, gpus)
        assert sorted(n for part in split for n, _ in part) == [n for n, _ in checks]
        assert all(gpu.expected_s(part, gpus) <= gpu.PART_S < gpu.CALL_S <= 9 * 60
                   for part in split)  # fmt: skip
        leases = [split[i : i + 2] for i in range(0, len(split), 2)]
        assert all(sum(gpu.expected_s(p, gpus) for p in lease) + gpu.START_S + 60 <= 15 * 60
                   for lease in leases)  # fmt: skip
    first = gpu.parts(checks, 1)[:2]  # the first lease: what changed, and nothing else first
    assert [n for part in first for n, _ in part][:5] == [0, 13, 6, 14, 15]
    assert [n for n, _ in first[0]][:3] == [0, 13, 6]
    command = [sys.executable, str(ROOT / "bench" / "gpu.py"), "--dry-run", "--only", "1,7,0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("lease 1, call 1 on 1 GPU: checks 0,1,7, about 1.0 min: timeout 540 python "
            "bench/gpu.py --part 1 --out part1.json") in done.stdout, done.stdout  # fmt: skip


def test_the_docs_table_of_the_lease_s_plan_follows_the_code() -> None:
    """docs/gpus.md said three parts after the code packed four: its table is the plan's."""
    import re

    text = (ROOT / "docs" / "gpus.md").read_text()
    rows = re.findall(r"^\| (\d+), (\d+) \| `python bench/gpu.py --part (\d+)[^|]*\| ([\d, ]+) "
                      r"\| ([\d.]+) min \|$", text, re.M)  # fmt: skip
    plan = [line.split(": checks ")[1] for line in gpu.lease_plan(gpu.plan(), 1)]
    assert len(rows) == len(plan)
    for (lease, call, part, checks, minutes), said in zip(rows, plan, strict=True):
        assert (int(lease), int(call)) == ((int(part) + 1) // 2, 2 - int(part) % 2)
        assert said.startswith(f"{checks.replace(' ', '')}, about {minutes} min"), (said, checks)


def traffic_measured(recorded: list[int], again: int = 0, tpot: float = 2.0,
                     ttft: float = 10.0, caches: tuple[int, ...] = (64, 128),
                     played: int = 3, near_tie: bool = False) -> Measurement:  # fmt: skip
    """Check 13's trial as a GPU would hand it: its first pass's recordings, those of its
    rounds, its weighted time per token and TTFT (eager's 4 ms and 10 ms)."""
    from autotune.trial.measurement import Accuracy, TokenCheck

    m = measured(0)
    m.traffic = {"recorded": recorded, "cache_lens": list(caches), "played": list(range(played)),
                 "stalls": len(recorded), "ready_s": 1.0, "eager_ready_s": 0.5,
                 "weighted": {"tpot_ms": tpot, "eager_tpot_ms": 4.0, "ttft_ms": ttft,
                              "eager_ttft_ms": 10.0}}  # fmt: skip
    m.timings = {"cuda_graph_recordings": float(sum(recorded)),
                 "cuda_graph_recordings_later": float(again)}  # fmt: skip
    m.accuracy = Accuracy(0.0, 0.0, True, 1e-2, 5e-2)
    m.tokens = TokenCheck(True, 20, 7 if near_tie else 20, "a near tie" if near_tie else "",
                          near_tie=near_tie)  # fmt: skip
    return m


def test_check_13_bounds_its_recordings_from_both_sides_and_asserts_its_speed() -> None:
    """Check 13 asserted recorded >= len(caches): a graph recorded again at every request (a
    cache made anew at each) passed it, as did a TTFT or a time per token worse than eager's."""
    eager = dataclasses.replace(OVERHEAD, prefill="eager", kv_cache="pow2")
    ok, _ = gpu.generations_verdict(traffic_measured([1, 1, 0]), eager)
    assert ok.startswith("PASS"), ok
    assert gpu.generations_verdict(traffic_measured([1, 1, 1, 0]), eager)[0].startswith("PASS")
    for bad in (traffic_measured([1, 1, 1, 1]),  # a recording at every request
                traffic_measured([1, 0, 0]),  # fewer than a graph a cache
                traffic_measured([1, 1, 0], again=1),  # a repeated key recorded again
                traffic_measured([1, 1, 0], tpot=4.5),  # slower per token than eager
                traffic_measured([1, 1, 0], ttft=13.0)):  # TTFT over 1.2 x eager's  # fmt: skip
        line, _ = gpu.generations_verdict(bad, eager)
        assert line.startswith("FAIL"), line
    compiled = gpu.generations_verdict(traffic_measured([2, 2, 2]), OVERHEAD)[0]
    assert compiled.startswith("PASS"), compiled  # a prefill graph a played request besides
    assert gpu.generations_verdict(traffic_measured([3, 3, 3]), OVERHEAD)[0].startswith("FAIL")
    tie, _ = gpu.generations_verdict(traffic_measured([1, 1, 0], near_tie=True), eager)
    assert tie.startswith("PASS"), tie  # the trial's own tolerance: a near tie passes
    moved = traffic_measured([1, 1, 1, 1])  # request 4's key: a later dynamic graph's now
    assert gpu.generations_verdict(moved, eager)[0].startswith("FAIL")
    moved.traffic["moved"] = [4]  # type: ignore[index]  # played again there: one more
    assert gpu.generations_verdict(moved, eager)[0].startswith("PASS")


def test_check_2_counts_recordings_not_memory_in_the_pools() -> None:
    """A warm-up run allocates in the private pools before any recording: a pool with memory
    in it passed check 2 with no graph recorded."""
    m = measured(0)
    m.timings = {"cuda_graph_pool_mb": 12.0, "cuda_graph_recordings": 0.0,
                 "cuda_graph_recordings_later": 0.0}  # fmt: skip
    assert not gpu.recorded_once(m)
    m.timings.update(cuda_graph_recordings=1.0)
    assert gpu.recorded_once(m)
    m.timings.update(cuda_graph_recordings_later=1.0)  # recorded again in the rounds
    assert not gpu.recorded_once(m)


def calls_found(recorded: list[int]) -> dict:
    tokens = [torch.tensor([[5, 6, 7]]) for _ in recorded]
    return {"recorded": recorded, "tokens": tokens, "static": True, "fallbacks": []}


def test_check_6_and_the_probe_bound_each_generate_call_s_recordings() -> None:
    """Check 6 kept its outputs alive across two calls and asserted no count: a graph recorded
    at every call passed it. The probe reads a healthy run as [1, 1, 0, 0]."""
    from autotune.trial.scenarios.generate import check_tokens

    same = check_tokens(torch.tensor([[5, 6, 7]]), torch.tensor([[5, 6, 7]]))
    assert gpu.applied_verdict(calls_found([1, 1, 0]), [same] * 3).passed
    assert not gpu.applied_verdict(calls_found([1, 1, 1]), [same] * 3).passed
    assert not gpu.applied_verdict(calls_found([0, 0, 0]), [same] * 3).passed
    wrong = check_tokens(torch.tensor([[5, 6, 7]]), torch.tensor([[5, 9, 7]]), "", [9.0], 0.1)
    assert not gpu.applied_verdict(calls_found([1, 1, 0]), [same, wrong, same]).passed
    tie = check_tokens(torch.tensor([[5, 6, 7]]), torch.tensor([[5, 9, 7]]), "", [1, 0.05], 0.1)
    assert gpu.applied_verdict(calls_found([1, 1, 0]), [same, tie, same]).passed
    assert gpu.probe_verdict("single", calls_found([1, 1, 0, 0]))[0].startswith("PASS")
    line, _ = gpu.probe_verdict("single", calls_found([1, 1, 1, 1]))  # a cache a call
    assert line.startswith("FAIL") and "[1, 1, 1, 1]" in line, line


def test_the_probe_s_and_check_6_s_calls_run_through_apply_generation_on_a_cpu() -> None:
    """What runs on the GPU runs here first (no recording on a CPU): four generate calls of
    apply_generation, each one's tokens, the static cache, and eager's answer and its check
    under the gate's tolerance."""
    import autotune
    from tests import models

    model, (prompt,) = models.tiny_llama()
    strategy = Strategy.create("full", "eager", kv_cache="pow2")
    found = gpu.generate_calls(autotune.apply_generation(model, strategy), prompt, 4, 5)
    assert found["recorded"] == [0, 0, 0, 0] and found["fallbacks"] == []
    assert all(t.shape == (prompt.shape[0], 5) for t in found["tokens"])
    expected, check = gpu.eager_answer(model, prompt, 5, "float32")
    assert all(check(t, "").passed for t in found["tokens"]), [
        check(t, "") for t in found["tokens"]
    ]
    assert expected.shape == (prompt.shape[0], 5)


def test_the_report_says_the_versions_first() -> None:
    """A lent machine's transformers was 5.17, below the generate paths' 5.24: the report and
    its first line say which ran."""
    import transformers

    found = gpu.machine()
    assert found["transformers"] == transformers.__version__ and found["torch"]
    line = gpu.versions_line(found)
    assert f"transformers {transformers.__version__}" in line and "torch " in line


def test_a_whole_run_counts_check_10_s_graphs_apart_from_the_checks_before_it() -> None:
    """Check 10 asserted Dynamo's graph count after ``torch._dynamo.reset()``, which clears no
    counter: run after the checks that compile in the same process, it read their graphs too."""
    torch._dynamo.reset()
    torch.compile(lambda x: x.sin() + 1, backend="eager")(torch.ones(3))  # an earlier check's
    bucketed = Strategy.create("full", "aot_eager", buckets="pow2", dynamic=False)
    workload = Workload(device="cpu")
    graphs, fallbacks = gpu.applied_buckets(ModelRef("tests.models:tiny_llama"), workload,
                                            bucketed)  # fmt: skip
    assert (graphs, fallbacks) == (2, [])  # buckets 32 and 64
