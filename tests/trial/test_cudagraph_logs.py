"""What Inductor logs of its CUDA graphs (autotune/trial/cudagraph_logs.py): read from its
private log lines, which these tests pin, on a CPU."""

from __future__ import annotations

import logging

import torch

from autotune.trial import cudagraph_logs, metrics


def test_cudagraph_skips_are_read_from_inductor() -> None:
    """Inductor's log line of a CUDA-graph fallback, and the compile it arose in, have no public
    API: if they change, this fails. A fallback at run time has no compile."""
    from torch._guards import CompileContext, CompileId, compile_context
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    with cudagraph_logs.cudagraph_skips() as skips:
        assert skips() == []
        with compile_context(CompileContext(CompileId(frame_id=7, frame_compile_id=1))):
            log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (1)")
        log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to a run-time reason")
        found = skips()
    assert found == [("7/1", "skipping cudagraphs due to mutated inputs (1)"),
                     ("", "skipping cudagraphs due to a run-time reason")]  # fmt: skip


def test_cudagraph_recordings_are_read_from_inductor() -> None:
    """A CUDA graph's recording has no counter and no public API: Inductor's CUDA-graph trees
    log each one from ``record_function`` (seen on an H100, torch 2.11). If that changes, this
    fails, and a traffic's stalls would leave out the recordings."""
    import inspect

    from torch._inductor import cudagraph_trees

    source = inspect.getsource(cudagraph_trees.CUDAGraphTreeManager.record_function)
    assert "log.debug(" in source and "Recording function=" in source
    assert cudagraph_trees.log.name == cudagraph_logs.RECORD_LOGGER

    def record_function() -> None:  # as the tree manager logs a recording
        cudagraph_trees.log.debug("[%s] Recording function=%s", "0/0", "partition_0")

    def run_eager() -> None:  # its warm-up, the call before the recording: not one
        cudagraph_trees.log.debug("[%s] Running warmup function=%s", "0/0", "partition_0")

    with cudagraph_logs.cudagraph_recordings() as recordings:
        assert recordings() == 0
        run_eager()
        record_function()
        record_function()
        assert recordings() == 2
    record_function()  # closed: no longer counted, and the logger is as it was
    assert recordings() == 2 and logging.getLogger(cudagraph_logs.RECORD_LOGGER).handlers == []


def test_a_graph_without_a_cuda_device_is_not_a_cuda_graph_fallback() -> None:
    """Inductor bumps its CUDA-graph skip counter without a line for a graph with no CUDA device
    (every graph on a CPU): that counter made strategies NO GRAPHS with an empty reason. Only
    the logged fallbacks count, each named by the graph (region) it arose in."""
    from torch._dynamo.utils import counters, get_compilation_metrics
    from torch._guards import CompileContext, CompileId, compile_context
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    def block(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    torch._dynamo.reset()
    before = counters["inductor"]["cudagraph_skips"]
    with cudagraph_logs.cudagraph_skips() as skips:
        torch.compile(block, mode="reduce-overhead")(torch.ones(4))
        assert counters["inductor"]["cudagraph_skips"] > before  # torch's silent count
        assert skips() == []
        ours = next(m.compile_id for m in get_compilation_metrics() if m.co_name == "block")
        frame, recompile = (int(n) for n in str(ours).split("/"))
        for _ in range(2):  # one graph, named once
            with compile_context(
                CompileContext(CompileId(frame_id=frame, frame_compile_id=recompile))
            ):
                log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to cpu device")
        log_cudagraph_skip_and_bump_counter("skipping cudagraph due to a re-record limit")
        found = metrics.cudagraph_skipped(skips())
    assert found == [
        f"graph {ours} block (test_cudagraph_logs.py:{block.__code__.co_firstlineno}): skipping "
        "cudagraphs due to cpu device",
        "at run time: skipping cudagraph due to a re-record limit",
    ]
