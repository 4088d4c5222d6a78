"""Which compiled graph a call runs. Dynamo keeps a code object's graphs in a list that it looks
up most recently used first (``torch/csrc/dynamo/extra_state.cpp``: ``lookup`` moves the entry
it hits to the front). Once a later shape compiles a dynamic graph, that graph comes first and
its guards accept the earlier shapes too: a later call at the first shape runs the dynamic
graph, not the static one its first arrival compiled. Nothing compiles, so no counter says so;
under CUDA graphs the dynamic graph then warms up and records at that shape, as at any new one.

A traffic's first pass reads it here: :func:`mark` where a shape was last played,
:func:`compiled_since` the graphs compiled after that, :func:`graphs_run` the graphs a call
ran; :func:`revisit` plays a later arrival that may run another graph now, :func:`settled` the
calls after a compile or a recording until one does neither. Dynamo names each graph's run on
the profiler's CPU timeline (``Torch-Compiled Region:`` and its compile id,
``torch/_dynamo/convert_frame.py``), the same id as its compilation record; neither is a
public API, so both are read here alone, and ``tests/trial/test_dispatch.py``'s
``test_graphs_run_reads_which_graph_dynamo_dispatched_to`` fails loudly if they change."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

from autotune.trial import metrics

REGION = "Torch-Compiled Region: "
T = TypeVar("T")
Call = Callable[[], tuple[T, int]]  # a compiled call: what it gives, and the graphs it compiled


def mark() -> int:
    """Where Dynamo's compilation records stand now (for :func:`compiled_since`)."""
    return len(metrics.records())


def compiled_since(at: int) -> set[str]:
    """The compile ids of the graphs compiled since :func:`mark` gave ``at``."""
    return {str(m.compile_id) for m in metrics.records()[at:]
            if m.compile_id is not None and m.fail_type is None}  # fmt: skip


@contextlib.contextmanager
def graphs_run() -> Iterator[set[str]]:
    """Yield a set that, after the block, holds the compile ids of the compiled graphs that ran
    in it (under torch's profiler, CPU events only: not for a timed call)."""
    from torch.profiler import ProfilerActivity, profile

    ran: set[str] = set()
    with profile(activities=[ProfilerActivity.CPU]) as found:
        yield ran
    ran.update(e.name[len(REGION) :] for e in found.events() if e.name.startswith(REGION))


def settled(call: Call[T], cost: Callable[[T], float], eager: float,
            recordings: Callable[[], int], tries: int = 3) -> tuple[T, float]:  # fmt: skip
    """Calls of ``call`` until one neither compiles a graph nor records a CUDA graph (Inductor's
    ``recordings``: a graph records at its second call at a set of sizes), at most ``tries``:
    the last one's value, which a shape's later arrivals stand at, and the stall of those before
    it (each one's ``cost`` over ``eager``'s, in the same unit)."""
    stall = 0.0
    for _ in range(tries):
        was = recordings()
        value, compiled = call()
        if not compiled and recordings() == was:
            break
        stall += max(0.0, cost(value) - eager)
    return value, stall


def revisit(call: Call[T], cost: Callable[[T], float], eager: float, fresh: set[str],
            recordings: Callable[[], int]) -> tuple[T | None, float]:  # fmt: skip
    """A later arrival of a shape after the graphs ``fresh`` compiled at others: one call,
    watched for the graphs it runs. Where it ran one of them (its shape moved to another graph:
    it warmed up there) or compiled, :func:`settled` calls on: what the shape's later arrivals
    stand at, and the stall (None and 0.0 where it runs what it ran)."""
    was = recordings()
    with graphs_run() as ran:
        warm, compiled = call()
    if not compiled and not ran & fresh:
        return None, 0.0
    stall = max(0.0, cost(warm) - eager) if compiled or recordings() > was else 0.0
    value, more = settled(call, cost, eager, recordings)
    return value, stall + more
