"""A traffic's trial counts what a plain server loop counts (issue 49): the compiles a stance
makes request by request, and the graphs the gate judged."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.parent import measure
from autotune.trial.request import Request
from autotune.trial.scenarios import TrafficTrial, begin
from autotune.workload import Settings, Workload

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ModelRef("tests.models:tiny_llama")
QUICK = Settings(iters=4, warmup=1, starts=("cold",), timeout_s=300)


PLAIN_LOOP = """
import json, sys, torch
from torch._dynamo.utils import counters
import autotune
from autotune.strategy import Strategy
from tests import models
strategy = Strategy.from_dict(json.loads(sys.argv[1]))
model, _ = models.tiny_llama()
served = autotune.apply(model, strategy)
# a request ran eager where the model's or a layer's own forward ran as Python (no counter of
# torch's says so); not watched while Dynamo compiles (Python runs 3x slower under a profiler)
codes = {type(m).forward.__code__ for m in [model, model.model, *model.model.layers]}
ran = []
def profile(frame, event, arg):
    if event == "call" and frame.f_code in codes:
        ran.append(frame.f_code.co_name)
torch._dynamo.callback_handler.register_start_callback(lambda _: sys.setprofile(None))
torch._dynamo.callback_handler.register_end_callback(lambda _: sys.setprofile(profile))
compiles, eager = [], []
with torch.no_grad():
    for n, (batch, length) in enumerate(json.loads(sys.argv[2]), 1):
        before = counters["stats"]["unique_graphs"]
        ids = torch.randint(0, 100, (batch, length))
        ran.clear()
        sys.setprofile(profile)
        served(input_ids=ids, attention_mask=torch.ones_like(ids))
        sys.setprofile(None)
        compiles.append(counters["stats"]["unique_graphs"] - before)
        if ran:
            eager.append(n)
print(json.dumps([compiles, eager]))
"""


def plain_loop(strategy: Strategy, requests: tuple) -> tuple[list[int], list[int]]:
    """The graphs each request compiles in a plain server loop a user would write, and the
    requests that ran eager: a fresh process, ``autotune.apply``, the requests in arrival
    order, Dynamo's own counter, and a profiler on the model's and its layers' forwards."""
    argv = [sys.executable, "-c", PLAIN_LOOP, json.dumps(strategy.to_dict()),
            json.dumps(requests)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    compiles, eager = json.loads(done.stdout.strip().splitlines()[-1])
    return compiles, eager


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aot_eager", "tests.models:wrong_backend"])
def test_eager_then_compile_compiles_where_a_plain_server_loop_does(backend: str) -> None:
    """The stance compiles a frame on its second call: the first pass's repeat and probe
    calls became that call, outside the window where compiles are counted, so the trial
    said request 2's recompile never happened. Played as a server plays it, the trial's
    compiles and requests served eager are the plain loop's, request by request; the
    off-by-one backend fails the gate on the graphs it compiled."""
    requests = ((1, 16), (1, 24), (1, 16), (1, 40), (1, 16), (1, 24))  # the first repeats
    strategy = Strategy.create("full", backend, dynamic=True, stance="eager_then_compile")
    m = measure(LLAMA, Workload(traffic=requests), strategy, QUICK)
    assert m.ok and m.traffic is not None and m.accuracy is not None, m.reason
    expected, eager = plain_loop(strategy, requests)
    assert m.traffic["compiles"] == expected, (m.traffic["compiles"], expected)
    assert sum(expected) >= 2  # a recompile after the first graph: the case that hid
    # the first request ran its model's forward eager (the stance's first call), though its
    # second layer compiled (a layer's code's second call): the trial said it ran compiled
    assert m.traffic["ran_eager"] == eager == [1], (m.traffic["ran_eager"], eager)
    assert m.accuracy.passed == (backend == "aot_eager"), m.accuracy.detail
    assert "nothing compiled ran" not in m.accuracy.detail


def test_the_gate_s_words_count_graphs_not_shapes() -> None:
    """``marks=seq-unbacked`` on the tiny Llama said "2 compiled graphs judged of 2" beside
    "8 graphs": it counted shapes. A regional compile makes a graph per region at a shape."""
    strategy = Strategy.create("regional", "aot_eager", dynamic=False)
    m = measure(LLAMA, Workload(traffic=((1, 8), (1, 16), (1, 8))), strategy, QUICK)
    assert m.ok and m.accuracy is not None and m.traffic is not None, m.reason
    graphs = sum(m.traffic["compiles"])
    shapes = sum(1 for c in m.traffic["compiles"] if c)
    assert graphs > shapes  # the case the words got wrong
    assert f"{graphs} of {graphs} graphs judged" in m.accuracy.detail, m.accuracy.detail


@pytest.mark.slow
def test_each_cuda_graph_recording_is_a_stall_though_nothing_compiled() -> None:
    """A dynamic graph records a CUDA graph at each new length without compiling again; each
    recording was added to the stall time but not to the count (``marks=seq`` on an H100: "1
    stall" for about 20 recordings). A CPU has no CUDA graphs: the model's wrapper logs a
    recording at each new length's second call, as Inductor's CUDA-graph trees do
    (tests/trial/test_cudagraph_logs.py: test_cudagraph_recordings_are_read_from_inductor), and the
    scenario takes the strategy for a CUDA-graph one, as on a GPU."""
    from torch._inductor import cudagraph_trees

    from autotune.cli.traffic_lines import traffic_lines

    requests = ((1, 8), (1, 16), (1, 24), (1, 16))
    torch._dynamo.reset()
    strategy = Strategy.create("full", "aot_eager", dynamic=True)
    request = Request.trial(LLAMA, Workload(traffic=requests), strategy, QUICK)
    scenario = TrafficTrial(begin(request))
    scenario.setup()
    scenario.graphs = True
    calls: collections.Counter[int] = collections.Counter()

    def record_function(length: int) -> None:
        cudagraph_trees.log.debug("[0/0] Recording function=partition_0, length %d", length)

    def second_call_records(module, args, kwargs):  # type: ignore[no-untyped-def]
        length = kwargs["input_ids"].shape[1] if "input_ids" in kwargs else args[0].shape[1]
        calls[length] += 1
        if calls[length] == 2:
            record_function(length)

    scenario.compiled.register_forward_pre_hook(second_call_records, with_kwargs=True)
    scenario.first()
    t = scenario.ctx.result.traffic
    assert t["compiles"] == [1, 0, 0, 0]  # one dynamic graph
    assert t["recorded"] == [1, 1, 1, 0]  # a recording at each new length
    assert t["stalls"] == 3, t
    assert "3 of 4 requests stalled" in traffic_lines(scenario.ctx.result)[0]
    assert "3 CUDA graphs recorded" in traffic_lines(scenario.ctx.result)[0]
