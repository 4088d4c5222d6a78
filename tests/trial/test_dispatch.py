"""Which compiled graph a call runs (autotune/trial/dispatch.py): read from Dynamo's profiler
annotation and its compilation records, which these tests pin on a CPU, and the calls a first
pass makes at a shape until one neither compiles nor records."""

from __future__ import annotations

import torch

from autotune.trial import dispatch


def test_graphs_run_reads_which_graph_dynamo_dispatched_to() -> None:
    """Dynamo looks its graphs up most recently used first: after a second length compiles a
    dynamic graph, the first length runs that one, not the static graph it compiled. The
    profiler's annotation and the compilation records have no public API: if either changes,
    this fails, and a first pass would miss a shape that moved to another graph."""

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sum(-1)

    torch._dynamo.reset()
    compiled = torch.compile(scaled, backend="eager")
    at = dispatch.mark()
    with dispatch.graphs_run() as first:
        compiled(torch.randn(2, 8))
    (static,) = dispatch.compiled_since(at)
    assert first == {static}
    at = dispatch.mark()
    compiled(torch.randn(2, 16))  # a recompile: dynamic in the length
    (dynamic,) = dispatch.compiled_since(at)
    assert dynamic != static and str(dynamic).split("/")[0] == str(static).split("/")[0]
    with dispatch.graphs_run() as again:
        compiled(torch.randn(2, 8))
    assert again == {dynamic}  # the first length moved to the dynamic graph
    assert dispatch.compiled_since(dispatch.mark()) == set()


class Counted:
    """A compiled call as a first pass makes it: each call's cost and the graphs it compiled,
    and Inductor's count of CUDA-graph recordings, which some calls raise."""

    def __init__(self, calls: list[tuple[float, int, int]]) -> None:
        self.calls, self.recorded, self.made = calls, 0, 0

    def __call__(self) -> tuple[float, int]:
        cost, compiled, recorded = self.calls[self.made]
        self.made += 1
        self.recorded += recorded
        return cost, compiled

    def recordings(self) -> int:
        return self.recorded


def test_settled_calls_on_until_a_call_neither_compiles_nor_records() -> None:
    """A compile, then its recording, then a call that did neither: the later arrivals stand
    at the last, and the two before it are stalls (their cost over eager's)."""
    call = Counted([(900.0, 1, 0), (300.0, 0, 1), (5.0, 0, 0), (5.0, 0, 0)])
    value, stall = dispatch.settled(call, float, 4.0, call.recordings)
    assert (value, stall, call.made) == (5.0, 896.0 + 296.0, 3)
    plain = Counted([(5.0, 0, 0)])
    assert dispatch.settled(plain, float, 4.0, plain.recordings) == (5.0, 0.0)
