"""The trial's skeleton (autotune/trial/scenarios/base.py): a trial counts the CUDA graphs it
records, in its first calls and again after them (the warm-up and timed rounds repeat the first
calls' shapes, so a healthy trial records none there): bench/gpu.py's checks read these counts,
not the memory in the private pools. On a CPU no graph is recorded, so the model below logs a
recording as Inductor's CUDA-graph trees do (the one layer of torch stood in for)."""

from __future__ import annotations

import torch

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial import child
from autotune.trial.request import Request
from autotune.workload import Settings, Workload

RECORD_AT = (2, 5)  # a graph recorded at the second call, as a tree does; again at the fifth


@torch.compiler.disable
def _call_logged(counter: list[int]) -> None:
    """What CUDAGraphTreeManager.record_function logs at a recording, at the calls above."""
    from torch._inductor import cudagraph_trees

    counter[0] += 1
    if counter[0] in RECORD_AT:

        def record_function() -> None:
            cudagraph_trees.log.debug("[%s] Recording function=%s", "0/0", "partition_0")

        record_function()


class Recording(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.calls = [0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _call_logged(self.calls)
        return self.linear(x).relu()


def recording() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Recording(), (torch.randn(4, 8),)


def test_a_trial_counts_the_cuda_graphs_recorded_in_its_first_calls_and_after() -> None:
    """The first calls (the compile, then the recording at the second call) record one graph;
    one recorded in the rounds is a shape recorded again, which check 2 and check 13 fail on
    (and a pool's memory never told apart from a warm-up's)."""
    strategy = Strategy.create("full", "inductor", "reduce-overhead")  # CUDA graphs on a GPU
    request = Request.trial(ModelRef(f"{__name__}:recording"), Workload(device="cpu"),
                            strategy, Settings(iters=3, warmup=1, starts=("cold",)))  # fmt: skip
    m = child.fulfil(request)
    assert m.timings["cuda_graph_recordings"] == 1, m.timings
    assert m.timings["cuda_graph_recordings_later"] == 1, m.timings
