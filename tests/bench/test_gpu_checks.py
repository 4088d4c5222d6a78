"""The GPU acceptance run's checks (bench/gpu.py) can fail, on a CPU: each verdict is fed what a
GPU run would hand it, a case that passes and one that fails; the run splits into parts that fit
a lent machine; a whole run in one process counts only its own graphs."""

from __future__ import annotations

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


def test_each_part_fits_a_lent_machine_s_call_and_every_check_runs_once() -> None:
    checks = list(enumerate(gpu.plan(), 1))
    for gpus in (1, 2):
        split = gpu.parts(checks, gpus)
        assert len(split) >= 2
        assert [n for part in split for n, _ in part] == [n for n, _ in checks]
        assert all(gpu.expected_s(part, gpus) <= gpu.PART_S <= 8 * 60 for part in split)
    one = gpu.parts(checks, 1)  # on one GPU, checks 8 and 9 cost nothing
    # any two parts fit one lease, less its start (the whole run no longer does: two leases)
    seconds = [gpu.expected_s(part, 1) for part in one]
    assert all(a + b < 15 * 60 - 120 for i, a in enumerate(seconds) for b in seconds[i + 1 :])
    command = [sys.executable, str(ROOT / "bench" / "gpu.py"), "--dry-run", "--only", "1,7"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "part 1 on 1 GPU: checks 1,7, about 0.2 min" in done.stdout, done.stdout


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
