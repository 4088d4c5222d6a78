"""The skeleton every trial follows (optimum-benchmark's ``Scenario.run``), written once:

1. :meth:`Scenario.setup`: build the model and inputs, compile them as the strategy says;
2. :meth:`Scenario.first`: the first calls, eager then compiled: the cold compile's time and
   peak memory, and the accuracy verdict;
3. warm-up rounds of every side's call, reading each one's peak memory (eager's without
   the compiled side's CUDA-graph pools, which live on in the same process);
4. timed rounds, interleaved with eager (:func:`autotune.trial.timing.interleave`), ended
   after a cheap rung where the strategy cannot reach the study's front
   (:mod:`autotune.trial.rungs`);
5. :meth:`Scenario.record`: the timed samples as latencies;
6. what Dynamo recorded (graphs, breaks, recompiles, a recompile limit in words), the compile
   phases, the cache counters, and the timings of each step.

Each workload (:mod:`.inference`, :mod:`.generate`) writes only its own steps.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from autotune import device
from autotune.catalog import ModelRef
from autotune.starts import artifact, later
from autotune.strategy import Strategy
from autotune.trial import accuracy, cudagraph_logs, metrics, recompiles, rungs, timing
from autotune.trial.measurement import PHASE, Accuracy, Measurement, Memory
from autotune.trial.request import Request
from autotune.workload import Workload


@dataclass
class TrialContext:
    """What every trial starts with: its request, its clock, the strategy, workload and model,
    an empty measurement to fill, and the peak-memory reader."""

    request: Request
    strategy: Strategy
    workload: Workload
    ref: ModelRef
    result: Measurement
    memory: device.PeakMemory
    start: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)
    reference: dict[str, Any] | None = None  # the study's higher-precision outputs

    @property
    def gate(self) -> accuracy.Gate:
        """The accuracy rule of this trial: its dtype's, or TF32's for float32 matmuls that run
        in TF32 here."""
        w = self.workload
        tf32 = device.tf32_matmuls(w.dtype, w.device)
        return accuracy.Gate(w.dtype, self.request.tolerance, tf32)

    def judge(self, expected: list[Any], actual: list[Any], *names: str) -> Accuracy:
        """The verdict on compiled outputs, against eager's and the reference's outputs
        ``names`` (in that order), under :attr:`gate`; against eager's alone where the
        reference holds none of them."""
        outputs = self.reference["outputs"] if self.reference else {}
        held = outputs and all(n in outputs for n in names)
        found = [t for n in names for t in outputs[n]] if held else None
        gate = self.gate
        verdict = accuracy.judge(expected, actual, found, gate.dtype, gate.tolerance,
                                 self.request.reference_dtype, gate.tf32)  # fmt: skip
        if found is None and self.request.reference_reason:
            verdict.rule += f" ({self.request.reference_reason})"
        return verdict

    @property
    def device(self) -> str:
        return self.workload.device

    @property
    def seed(self) -> int:
        return self.request.seed

    def phase(self, name: str) -> None:
        """Say in the log which phase begins: where a stopped trial had got to."""
        print(f"{PHASE}{name}", flush=True)

    def lap(self, name: str, since: float) -> float:
        """Record the seconds since ``since`` as timing ``name``; now."""
        now = time.perf_counter()
        self.timings[name] = now - since
        return now


def begin(request: Request) -> TrialContext:
    """Seed the RNG, make the device current, start an empty measurement."""
    import torch
    import torch._dynamo.utils

    from autotune.environment import fingerprint

    start = time.perf_counter()
    strategy, workload, ref = request.strategy, request.workload, request.model
    torch.manual_seed(request.seed)
    device.use(workload.device)
    device.tf32_for(workload.dtype, workload.device)
    torch._dynamo.utils.set_compilation_metrics_limit(1_000_000)
    result = Measurement(strategy.to_dict(), ref.to_dict(), workload.to_dict(), "ok",
                         environment=fingerprint(workload.device))  # fmt: skip  # with its TF32
    memory = device.PeakMemory(workload.device)
    ctx = TrialContext(request, strategy, workload, ref, result, memory, start)
    ctx.timings["startup_s"] = time.time() - (request.launched or time.time())
    ctx.timings["threads"] = float(metrics.pin_threads())
    if request.reference and strategy.granularity != "none":
        ctx.reference = accuracy.load_reference(request.reference)
    return ctx


class Scenario(ABC):
    """One workload's trial. Subclasses set :attr:`model` (the compiled tree's original, for
    the recompile probe) in :meth:`setup` and fill in the steps below."""

    model: Any = None

    def __init__(self, ctx: TrialContext) -> None:
        self.ctx = ctx
        self.tally = [0, 0]  # timed rounds compiled won and lost, counted as they come
        self.rung = rungs.Rung.of(ctx.request)  # the cheap rung still to check, if any
        self.recorded: Callable[[], int] = lambda: 0  # CUDA graphs recorded so far (run)
        self.first_peak: float | None = None  # the first calls' peak, where read in parts

    @contextlib.contextmanager
    def compiled_part(self) -> Iterator[None]:
        """A part of the first calls where the compiled side runs alone: where a first pass
        reads its peak in such parts, the first calls' peak (``compile_peak_mb``) is the
        largest part's, eager's calls between them left out, as a single shape's is."""
        self.ctx.memory.reset()
        try:
            yield
        finally:
            self.first_peak = max(self.first_peak or 0.0, self.ctx.memory.peak_mb())

    def others_mb(self, side: str) -> float:
        """MiB that the other sides' state holds while ``side`` runs (a generation's KV caches,
        allocated once and kept for the rounds): left out of ``side``'s peak."""
        return 0.0

    @abstractmethod
    def setup(self) -> None:
        """Build the model and inputs, and compile them."""

    @abstractmethod
    def first(self) -> None:
        """The first calls: ``compile_s`` and the accuracy verdict."""

    @abstractmethod
    def calls(self) -> dict[str, Callable[[], Any]]:
        """One whole call of each side, ``eager`` and ``compiled``, for warm-up and timing."""

    def timer(self, call: Callable[[], Any]) -> Any:
        """One timed call (its sample): seconds, on the device's clock."""
        return device.timed(call, self.ctx.device)

    def seconds(self, sample: Any) -> float:
        """One round's sample as the seconds the sign test compares."""
        return float(sample)

    def after_round(self, samples: dict[str, list[Any]]) -> bool:
        """After each timed round: True ends the rounds, once the sign test between eager and
        compiled is decided whatever the remaining rounds would give, or after a cheap rung
        that shows the strategy cannot reach the front."""
        if self.ctx.strategy.granularity == "none":
            return False
        ran = len(samples["compiled"])
        if self.rung is not None and ran == self.rung.rounds and self.cannot_reach(samples):
            return True
        e, c = self.seconds(samples["eager"][-1]), self.seconds(samples["compiled"][-1])
        self.tally[0] += e > c  # this round's win or loss: the counts grow, never recounted
        self.tally[1] += e < c
        if ran < timing.MIN_ROUNDS:
            return False
        return timing.settled(*self.tally, self.ctx.request.iters - ran)

    def confirm_ends(self, samples: dict[str, list[Any]]) -> bool:
        """A confirmation's trial over a traffic times all its rounds, unless no more rounds
        could show it faster than eager (then "not shown" is what all would say)."""
        timed = {k: [self.seconds(s) for s in v] for k, v in samples.items()}
        return timing.none_can_show(timed, self.ctx.request.iters, "eager")

    def cannot_reach(self, samples: dict[str, list[Any]]) -> bool:
        """The cheap rung's check on its rounds ``samples``: True, with the measurement marked
        ``cheap`` and why, where the strategy cannot reach the front; else it goes on, marked
        ``full``, and no later round checks again."""
        assert self.rung is not None
        m = self.ctx.result
        eager = [self.seconds(s) for s in samples["eager"]]
        compiled = [self.seconds(s) for s in samples["compiled"]]
        memory = m.memory.compiled_peak_mb if m.memory else None
        why = self.rung.verdict(m.compile_s or 0.0, eager, compiled, memory)
        m.rung, m.reason, self.rung = ("cheap" if why else "full"), why, None
        return bool(why)

    def time_rounds(self, calls: dict[str, Callable[[], Any]]) -> dict[str, list[Any]]:
        """The timed rounds of ``calls``, interleaved, ended by :meth:`after_round` or the
        request's deadline (never before its least rounds)."""
        request = self.ctx.request
        return timing.interleave(calls, request.iters, self.timer, request.seed,
                                 self.after_round, request.deadline, request.least)  # fmt: skip

    @abstractmethod
    def record(self, samples: dict[str, list[Any]]) -> None:
        """The timed samples as the measurement's latencies."""

    def probes(self) -> dict[str, Callable[[], Any]]:
        """Calls that a recompile-limit probe runs once each, to count blocks left eager."""
        return {"call": self.calls()["compiled"]}

    def build(self, kind: str, path: str) -> dict[str, Any]:
        """After the measurement is safe with the parent: build the ``kind`` artefact (a start
        that skips the compiler) at ``path``; its size, build time and fingerprint, or
        ``error``. A workload without such artefacts builds none."""
        return {"error": f"the {self.ctx.workload.kind} workload builds no {kind} artefact"}

    def run(self) -> Measurement:
        with (
            cudagraph_logs.cudagraph_skips() as skips,
            cudagraph_logs.cudagraph_recordings() as self.recorded,
            metrics.others_cpu() as load,
        ):
            m = self._run()
        if "others_cpu" not in m.timings and "share" in load:  # rounds too short to read
            m.timings["others_cpu"] = load["share"]  # the whole trial's then
        graphs = device.marks_steps(self.ctx.device, self.ctx.strategy.uses_cuda_graphs())
        if m.graphs is not None and graphs:  # a strategy that replays CUDA graphs, on a GPU
            found = skips()
            m.graphs.cudagraph_skipped = metrics.cudagraph_skipped(found)
            m.graphs.cudagraph_skips = len(m.graphs.cudagraph_skipped)
            m.graphs.cudagraph_skip_reason = found[0][1] if found else ""
        return m

    def _run(self) -> Measurement:
        ctx, m = self.ctx, self.ctx.result
        if ctx.request.load_artifact:  # a portable start: the saved caches, then compile
            m.load_s = artifact.load(ctx.request.load_artifact)
        ctx.phase("building the model")
        self.setup()
        t = ctx.lap("build_s", ctx.start)
        ctx.memory.reset()
        ctx.phase("compiling (its first calls)")
        self.first()
        t = ctx.lap("first_s", t)
        first = self.recorded()  # the CUDA graphs the first calls recorded
        compile_peak = ctx.memory.peak_mb() if self.first_peak is None else self.first_peak
        if ctx.strategy.uses_cuda_graphs() and device.is_cuda(ctx.device):  # what they recorded
            # one pool, which every graph the first calls recorded shares: not one a graph
            ctx.timings["cuda_graph_pool_mb"] = ctx.memory.pools_mb()
        calls = self.calls()
        ctx.phase("warming up")
        peaks = dict.fromkeys(calls, 0.0)
        for _ in range(max(1, ctx.request.warmup)):
            for name, call in calls.items():
                ctx.memory.reset()
                self.timer(call)
                # the compiled side's CUDA graphs live on in this process: their pool is the
                # compiled side's memory, never eager's; nor is another side's KV cache
                peak = ctx.memory.peak_mb(pools=name != "eager") - self.others_mb(name)
                peaks[name] = max(peaks[name], peak)
        m.memory = Memory(ctx.memory.kind, peaks["eager"], peaks["compiled"], compile_peak)
        if device.is_cuda(ctx.device):  # each reading emptied the cache: one call of each side
            for call in calls.values():  # after the last, so that neither side's first timed
                self.timer(call)  # call pays the cudaMalloc the other's did not
        t = ctx.lap("warmup_s", t)
        device.synchronize(ctx.device)
        ctx.phase("timing its rounds")
        with metrics.others_cpu() as load:
            samples = self.time_rounds(calls)
        t = ctx.lap("timing_s", t)
        if "share" in load:  # how much of the CPU other processes took meanwhile
            ctx.timings["others_cpu"] = load["share"]
        ctx.timings["rounds"] = float(timing.rounds_of(samples))
        self.record(samples)
        if ctx.strategy.uses_cuda_graphs():  # none recorded on a CPU
            # recordings count, not memory in the pools (a warm-up run allocates there too);
            # a graph recorded after the first calls recorded a shape they had already seen
            ctx.timings["cuda_graph_recordings"] = float(first)
            ctx.timings["cuda_graph_recordings_later"] = float(self.recorded() - first)
        m.graphs = metrics.graphs()
        if ctx.strategy.granularity != "none":
            m.graphs = recompiles.describe(m.graphs, self.model, self.probes())
        m.phases = metrics.phases()
        m.cache = later.cache_counters()
        if ctx.request.save_artifact:  # for a portable start, and for export to ship
            m.artifact = artifact.save(ctx.request.save_artifact, ctx.device)
        ctx.lap("child_s", ctx.start)
        m.timings = ctx.timings
        return m
