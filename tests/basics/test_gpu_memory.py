"""A trial's peak memory on a GPU, on a CPU: only torch's lowest CUDA layer is stood in for (the
caching allocator's stats, its snapshot, the cache, the device), never autotune's code."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

from autotune import device
from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.measurement import Latency, Measurement
from autotune.trial.request import Request
from autotune.trial.scenarios.base import Scenario, TrialContext
from autotune.workload import Workload

MiB = 2**20
WEIGHTS, CALL, POOL = 100, 10, 40  # MiB: the model, one call's transients, the graphs' pool


class Allocator:
    """The CUDA caching allocator as its stats and snapshot report it, in MiB: live tensors and
    what calls left cached in the default pool, CUDA graphs' private pools (which no
    ``empty_cache`` frees while the graphs live), and the reserved peak since the last reset."""

    def __init__(self) -> None:
        self.live, self.cached, self.peak = WEIGHTS, 0, 0
        self.pools: dict[tuple[int, int], int] = {}

    def reserved(self) -> int:
        return self.live + self.cached + sum(self.pools.values())

    def empty(self) -> None:
        self.cached = 0

    def reset(self, index: int | None = None) -> None:
        self.peak = self.reserved()

    def call(self, transient: int) -> None:
        """A call whose tensors need ``transient`` MiB for a moment, then go back to the cache."""
        self.cached = max(self.cached, transient)
        self.peak = max(self.peak, self.reserved())

    def record(self) -> None:
        """A CUDA graph's recording: its memory is a private pool from now on."""
        self.pools[(0, 1)] = POOL
        self.peak = max(self.peak, self.reserved())

    def stats(self, index: int | None = None) -> dict[str, Any]:
        return {"reserved_bytes": {"all": {"peak": self.peak * MiB}},
                "allocated_bytes": {"all": {"peak": self.live * MiB}}}  # fmt: skip

    def snapshot(self, *_: Any) -> dict[str, Any]:
        default = {"device": 0, "segment_pool_id": (0, 0),
                   "total_size": (self.live + self.cached) * MiB}  # fmt: skip
        pools = [{"device": 0, "segment_pool_id": pool, "total_size": mb * MiB}
                 for pool, mb in self.pools.items()]  # fmt: skip
        return {"segments": [default, *pools], "device_traces": []}


def stand_in(monkeypatch: pytest.MonkeyPatch, found: Allocator) -> Allocator:
    """torch's lowest CUDA layer, as one GPU would answer, its allocator held by ``found``."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "_exchange_device", lambda index: 0)
    monkeypatch.setattr(torch.cuda, "_maybe_exchange_device", lambda index: 0)
    for name, fn in (("_cuda_getDevice", lambda: 0), ("_cuda_synchronize", lambda: None),
                     ("_cuda_emptyCache", found.empty),
                     ("_cuda_resetPeakMemoryStats", found.reset),
                     ("_cuda_memoryStats", found.stats),
                     ("_cuda_memorySnapshot", found.snapshot)):  # fmt: skip
        monkeypatch.setattr(torch._C, name, fn, raising=False)
    return found


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> Allocator:
    return stand_in(monkeypatch, Allocator())


class Pooled(Scenario):
    """A ``reduce-overhead`` trial as the allocator sees it: each eager call needs ``CALL`` MiB
    for a moment; the compiled side's first call compiles (the same), its second records a CUDA
    graph whose pool then holds its memory, and its replays allocate nothing more."""

    def __init__(self, ctx: TrialContext, allocator: Allocator) -> None:
        super().__init__(ctx)
        self.allocator = allocator

    def setup(self) -> None:
        self.model = torch.nn.Linear(2, 2)

    def first(self) -> None:
        self.allocator.call(CALL)  # eager's first call
        self.allocator.call(CALL)  # the compile
        self.allocator.record()  # the second call records the graph
        self.ctx.result.compile_s = 1.0

    def calls(self) -> dict[str, Callable[[], Any]]:
        return {"eager": lambda: self.allocator.call(CALL), "compiled": lambda: None}

    def timer(self, call: Callable[[], Any]) -> float:
        start = time.perf_counter()
        call()
        return time.perf_counter() - start + 1e-6

    def record(self, samples: dict[str, list[Any]]) -> None:
        self.ctx.result.eager_latency = Latency.from_samples(samples["eager"])
        self.ctx.result.latency = Latency.from_samples(samples["compiled"])


def test_eager_s_peak_leaves_out_the_compiled_side_s_cuda_graph_pool(allocator) -> None:
    """Eager's peak was read in the process where the compiled side's graphs live, and
    ``empty_cache`` cannot free a live pool: every reduce-overhead trial's eager peak carried
    the graphs, and "compiled against eager" understated what compiling costs in memory."""
    strategy = Strategy.create("full", "inductor", "reduce-overhead")
    workload, ref = Workload(device="cuda:0"), ModelRef("toy-64", layers=1)
    request = Request("trial", strategy, ref, workload, iters=3, warmup=2)
    result = Measurement(strategy.to_dict(), ref.to_dict(), workload.to_dict(), "ok")
    ctx = TrialContext(request, strategy, workload, ref, result, device.PeakMemory("cuda:0"))
    m = Pooled(ctx, allocator).run()
    assert m.memory is not None and m.memory.kind == "cuda-max-reserved"
    assert m.memory.eager_peak_mb == WEIGHTS + CALL  # not WEIGHTS + CALL + POOL
    assert m.memory.compiled_peak_mb == WEIGHTS + POOL  # the compiled side keeps its graphs'
    assert allocator.pools  # the pool was live all along: nothing freed it


def test_the_pools_are_read_from_the_allocator_s_segments(allocator) -> None:
    peak = device.PeakMemory("cuda:0")
    allocator.record()
    peak.reset()
    allocator.call(CALL)
    assert peak.peak_mb() == WEIGHTS + CALL + POOL
    assert peak.peak_mb(pools=False) == WEIGHTS + CALL
    assert device.PeakMemory("cpu").peak_mb(pools=False) > 0  # a CPU has no pools to leave out


class Mallocs(Allocator):
    """The allocator, counting each side's calls that found too little cached once timing
    began: each of those is a ``cudaMalloc`` inside a timed call."""

    def __init__(self) -> None:
        super().__init__()
        self.timing = False
        self.mallocs: list[str] = []

    def call(self, transient: int, side: str = "eager") -> None:
        if self.timing and self.cached < transient:
            self.mallocs.append(side)
        super().call(transient)


class Timed(Pooled):
    """``Pooled`` where both sides allocate per call (as a traffic's logits do), and the
    allocator knows when the timed rounds begin."""

    def calls(self) -> dict[str, Callable[[], Any]]:
        return {"eager": lambda: self.allocator.call(CALL, "eager"),
                "compiled": lambda: self.allocator.call(CALL // 2, "compiled")}  # fmt: skip

    def time_rounds(self, calls: dict[str, Callable[[], Any]]) -> dict[str, list[Any]]:
        self.allocator.timing = True
        return super().time_rounds(calls)


def trial_on(allocator: Allocator, scenario: type[Pooled]) -> Measurement:
    strategy = Strategy.create("full", "inductor", "reduce-overhead")
    workload, ref = Workload(device="cuda:0"), ModelRef("toy-64", layers=1)
    request = Request("trial", strategy, ref, workload, iters=3, warmup=2)
    result = Measurement(strategy.to_dict(), ref.to_dict(), workload.to_dict(), "ok")
    ctx = TrialContext(request, strategy, workload, ref, result, device.PeakMemory("cuda:0"))
    return scenario(ctx, allocator).run()


def test_no_timed_call_pays_an_allocation_the_other_side_did_not(monkeypatch) -> None:
    """The warm-up empties the cache before each reading and the compiled side's came last, so
    eager's first timed call paid ``cudaMalloc`` (for a traffic, hundreds of MB of logits)."""
    found = stand_in(monkeypatch, Mallocs())
    m = trial_on(found, Timed)
    assert m.eager_latency is not None and len(m.eager_latency.samples_ms) == 3
    assert found.mallocs == []  # each side found its memory cached, as in its later calls
    assert m.memory is not None and m.memory.eager_peak_mb == WEIGHTS + CALL  # still read apart


def test_a_trial_reads_what_its_cuda_graphs_recorded_into_their_pools(allocator) -> None:
    """Check 2 asked ``recording > 0`` of the second call's time, which is stored whatever that
    call did; the pool holds a recorded graph's memory, and holds nothing where none was. It is
    one pool, which every graph shares (``cuda_graph_pool_mb``), not a figure a graph."""
    m = trial_on(allocator, Pooled)
    assert m.timings["cuda_graph_pool_mb"] == POOL

    class Unrecorded(Pooled):
        def first(self) -> None:
            self.allocator.call(CALL)  # compiled, but no graph recorded (a silent fallback)
            self.ctx.result.compile_s = 1.0

    allocator.pools.clear()
    assert trial_on(allocator, Unrecorded).timings["cuda_graph_pool_mb"] == 0


CACHES, EAGER_FIRST = 30, 50  # MiB: the compiled side's KV caches; eager's first pass, a moment


class Caching(Pooled):
    """A generation's trial as the allocator sees it: the compiled side's KV caches (a cache a
    bucket) are allocated once and kept for its rounds, and live while eager's peak is read;
    the first calls play eager's first pass (a larger call) between the compiled side's parts,
    as a generate traffic's first pass does."""

    def first(self) -> None:
        self.allocator.live += CACHES  # the compiled side's caches, before its first call
        self.allocator.call(EAGER_FIRST)  # eager's whole first generation
        with self.compiled_part():
            self.allocator.call(CALL)  # the compiled side's, then its repeat
            self.allocator.record()
        self.allocator.call(EAGER_FIRST)  # the next request's eager generation
        self.ctx.result.compile_s = 1.0

    def others_mb(self, side: str) -> float:
        return 0.0 if side == "compiled" else float(CACHES)


def test_each_side_s_peak_leaves_out_the_others_caches_and_eager_s_first_pass(allocator) -> None:
    """Eager's peak held every bucket's cache, and the first calls' peak eager's first pass."""
    m = trial_on(allocator, Caching)
    assert m.memory is not None
    assert m.memory.eager_peak_mb == WEIGHTS + CALL  # not + CACHES
    assert m.memory.compiled_peak_mb == WEIGHTS + CACHES + POOL
    assert m.memory.compile_peak_mb == WEIGHTS + CACHES + CALL + POOL  # not EAGER_FIRST
