"""A traffic's first pass (step 1 of :mod:`.traffic_trial`): each distinct shape's first arrival in
arrival order, eager's call then the compiled model's, then an untimed probe; a stance that
counts calls played in a server's order first. Every compiled call it makes is counted by
Dynamo's own counters, the repeat and the probe included: a compile in either is the
request's, and its stall."""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, Protocol

from autotune import device, traffic
from autotune.trial import dispatch, metrics, recompiles

Shape = tuple[int, int]


class Played(Protocol):
    """What a first pass plays on and fills (a :class:`~.traffic_trial.TrafficTrial` scenario): its
    context, each side's call per shape, the units a probe watches, whether it records CUDA
    graphs, and the shapes that compiled (graphs per shape) or were served eager."""

    ctx: Any
    steps: dict[str, dict[Shape, Callable[[], Any]]]
    units: list[Any]
    graphs: bool
    compiled_shapes: list[Shape]
    graphs_at: collections.Counter[Shape]
    eager_shapes: set[Shape]

    def ran_eager(self, shape: Shape) -> bool: ...


class FirstPass:
    """One first pass over the traffic of ``scenario`` (whose compiled shapes, graphs per
    shape and shapes served eager it fills), reading CUDA-graph ``recordings`` as it goes."""

    def __init__(self, scenario: Played, recordings: Callable[[], int]) -> None:
        ctx = scenario.ctx
        self.scenario, self.recordings, self.device = scenario, recordings, ctx.device
        self.requests = ctx.workload.traffic
        self.compiled_side = ctx.strategy.granularity != "none"
        self.until_compiled = ctx.strategy.stance == "eager_then_compile"
        self.confirming = ctx.request.kind == "confirm"  # only the state matters: eager untimed
        self.first: dict[Shape, float] = {}  # eager's first call of each shape
        self.repeat: dict[str, dict[Shape, float]] = {"eager": {}, "compiled": {}}
        self.timed: dict[str, list[float | None]] = {"eager": [], "compiled": []}
        self.found: dict[str, Any] = {"compiles": [], "recorded": [], "reasons": [],
                                      "stall_ms": [], "played": [], "moved": []}  # fmt: skip
        self.marks: dict[Shape, int] = {}  # where Dynamo's records stood at a shape's last play
        self.by_stance: set[int] = set()  # requests a stance ran (partly) eager
        # a shape's repeat latency stands for its later arrivals, or finds a CUDA graph's
        # recording: a shape that arrives once has no later arrival to stand for
        arrivals = collections.Counter(self.requests)
        self.repeated = {s for s, n in arrivals.items() if n > 1 or scenario.graphs}
        # an eager baseline under a budget: past first_by, a sample of the shapes (sample())
        sampling = not self.compiled_side and not self.confirming
        self.first_by = ctx.request.first_by if sampling else 0.0
        self.kept: set[Shape] | None = None  # the shapes it plays, where it samples
        self.estimated: list[Shape] = []  # ...and those it left out, estimated
        self.sampled: dict[str, Any] = {}

    def ms(self, side: str, shape: Shape) -> float:
        """One call of ``side`` at ``shape``, in milliseconds (eager untimed in a
        confirmation)."""
        if self.confirming and side == "eager":
            return 0.0
        return device.wall(self.scenario.steps[side][shape], self.device)[0] * 1e3

    def eager_first(self, shape: Shape) -> float:
        """Eager's first call of a new shape (and its repeat, where one stands for later
        arrivals): the milliseconds a request of it took eager."""
        self.first[shape] = self.ms("eager", shape)
        if shape in self.repeated:
            self.repeat["eager"][shape] = self.ms("eager", shape)
        self.timed["eager"].append(self.first[shape])
        return self.first[shape]

    def compiled_call(
        self, n: int, shape: Shape, watch: bool = False
    ) -> tuple[float, int, bool, bool]:
        """The compiled model's call of request ``n``, counted by Dynamo's own counters: its
        milliseconds, the graphs it compiled, whether it hit the recompile limit, and
        (``watch``) whether a compiled unit ran its own forward as Python in it."""
        s = self.scenario
        before = metrics.compile_counts()
        watching = recompiles.eager_blocks(s.units) if watch else nullcontext(set())
        with watching as seen:
            took = self.ms("compiled", shape)
        after = metrics.compile_counts()
        compiles = after[0] - before[0]
        if compiles and shape not in s.compiled_shapes:
            s.compiled_shapes.append(shape)
            s.eager_shapes.discard(shape)
        s.graphs_at[shape] += compiles
        self.marks[shape] = dispatch.mark()
        self.timed["compiled"].append(took)
        self.found["compiles"].append(compiles)
        self.found["reasons"] += [[n, r] for r in after[2][len(before[2]) :]]
        return took, compiles, after[1] > before[1], bool(seen)

    def counted(self, n: int, shape: Shape, call: Callable[[], Any]) -> tuple[Any, int]:
        """An extra compiled call of request ``n`` (its repeat, its probe): what it returns,
        and the graphs it compiled, counted into the request's."""
        s = self.scenario
        before = metrics.compile_counts()
        value = call()
        after = metrics.compile_counts()
        more = after[0] - before[0]
        if more:
            self.found["compiles"][-1] += more
            self.found["reasons"] += [[n, r] for r in after[2][len(before[2]) :]]
            s.graphs_at[shape] += more
            if shape not in s.compiled_shapes:
                s.compiled_shapes.append(shape)
        return value, more

    def server_order(self) -> int:
        """A stance that counts calls (``eager_then_compile`` compiles a frame on its second
        call), played as a server plays it: one compiled call a request and no other, each
        watched for a unit that ran its forward as Python, until its first compile and then
        every shape served compiled (or past the limit) after it. The requests it played."""
        s, found, start = self.scenario, self.found, 0
        compiled_any, since, distinct = False, set(), set(self.requests)
        while start < len(self.requests):
            if compiled_any and since | s.eager_shapes >= distinct:
                break
            shape = self.requests[start]
            start += 1
            found["played"].append(start)
            if shape in self.first:
                eager_ms = self.repeat["eager"][shape]
                self.timed["eager"].append(eager_ms)
            else:
                eager_ms = self.eager_first(shape)
            was, recorded = compiled_any, self.recordings()
            took, compiles, limited, eager = self.compiled_call(start, shape, watch=True)
            found["recorded"].append(self.recordings() - recorded)
            compiled_any = compiled_any or compiles > 0
            found["stall_ms"].append(max(0.0, took - eager_ms) if compiles else 0.0)
            if was and not compiles:  # the compiled code served it, as it will again
                self.repeat["compiled"][shape] = took
            if eager or not compiled_any:  # a frame's first call, or all of it, ran eager
                self.by_stance.add(start)
            if limited:  # past the recompile limit: served eager from now on
                s.eager_shapes.add(shape)
            elif compiled_any and not eager:  # served compiled, as it will be again
                since.add(shape)
        for shape in set(self.requests[start:]) - set(self.repeat["compiled"]) if start else ():
            self.repeat["compiled"][shape] = self.ms("compiled", shape)  # later arrivals' stand
        return start

    def first_arrival(self, n: int, shape: Shape) -> None:
        """Request ``n``, a shape's first arrival: eager's call, the compiled model's, its
        repeat where one stands for later arrivals (a call that neither compiled nor recorded a
        CUDA graph: those before it are stalls, :func:`.dispatch.settled`), then the probe."""
        s, found, repeat = self.scenario, self.found, self.repeat
        found["played"].append(n)
        eager_ms, recorded = self.eager_first(shape), self.recordings()
        if self.compiled_side:
            took, compiles, _, _ = self.compiled_call(n, shape)
        else:
            took, compiles = eager_ms, 0
            self.timed["compiled"].append(took)
            found["compiles"].append(0)
        stall = max(0.0, took - eager_ms) if compiles else 0.0
        repeated = not self.confirming and shape in self.repeated
        if repeated and self.compiled_side:
            repeat["compiled"][shape], more = dispatch.settled(
                self.repeat_call(n, shape), float, repeat["eager"][shape], self.recordings
            )
            stall += more
        else:
            repeat["compiled"][shape] = repeat["eager"][shape] if repeated else took
        if self.compiled_side:  # the probe: a compile or a recording in it is a stall too
            was = self.recordings()
            probe_s, (eager, more) = device.wall(
                functools.partial(self.counted, n, shape, functools.partial(s.ran_eager, shape)),
                self.device)  # fmt: skip
            if more or self.recordings() > was:
                stall += max(0.0, probe_s * 1e3 - repeat["eager"].get(shape, eager_ms))
            if eager:
                s.eager_shapes.add(shape)
        found["recorded"].append(self.recordings() - recorded)  # the repeat's recording too
        found["stall_ms"].append(stall)
        self.marks[shape] = dispatch.mark()

    def repeat_call(self, n: int, shape: Shape) -> dispatch.Call[float]:
        """The compiled model's repeat at ``shape`` for request ``n``, as :mod:`..dispatch`
        calls it: its milliseconds, and the graphs it compiled (the request's)."""
        return functools.partial(self.counted, n, shape, functools.partial(self.ms, "compiled",
                                                                           shape))  # fmt: skip

    def revisit(self, n: int, shape: Shape) -> None:
        """Request ``n``, a later arrival of ``shape`` after graphs compiled at other shapes:
        played again where it may run another graph now (:func:`.dispatch.revisit`: a dynamic
        graph takes over a static one's shape), its warm-up, compiles and recording its
        stall, its later arrivals at the new graph's latency."""
        if shape not in self.marks or not self.compiled_side or self.confirming:
            return
        if fresh := dispatch.compiled_since(self.marks[shape]):
            was = self.recordings()
            eager = self.repeat["eager"].get(shape, self.first[shape])
            again, stall = dispatch.revisit(self.repeat_call(n, shape), float, eager, fresh,
                                            self.recordings)  # fmt: skip
            if again is not None:
                self.found["moved"].append(n)
                self.repeat["compiled"][shape] = self.timed["compiled"][-1] = again
            self.found["recorded"][-1] = self.recordings() - was
            self.found["stall_ms"][-1] = stall
        self.marks[shape] = dispatch.mark()

    def calls(self, shape: Shape) -> int:
        """Eager's calls of a new shape in the first pass: its first, and a repeat where the
        shape arrives again."""
        return 2 if shape in self.repeated else 1

    def sample(self) -> set[Shape] | None:
        """An eager baseline's shapes to play, chosen once its first request has played: all
        of them (None) where they fit before ``first_by`` at that request's rate per token,
        else as many as fit at evenly spaced quantiles by size that keep the traffic's mix
        (:func:`autotune.traffic.steady`); the others are estimated at their size."""
        (played, ms), = self.first.items()  # fmt: skip
        per_token = ms / 1e3 / (played[0] * played[1])
        rest = tuple(r for r in self.requests if r not in self.first)

        def cost(shapes: Any) -> float:
            return sum(per_token * b * n * self.calls((b, n)) for b, n in shapes)

        left = self.first_by - time.time()
        distinct = set(rest)
        if cost(distinct) <= left:
            return None
        for most in range(len(distinct) - 1, 0, -1):
            kept = set(traffic.steady(rest, most=most))
            if cost(kept) <= left:
                break
        else:
            kept = set()
        self.sampled = {"timed": 1 + len(kept), "shapes": 1 + len(distinct)}
        return kept

    def estimate(self, n: int, shape: Shape) -> None:
        """Request ``n``, a shape the baseline's sample left out: eager's milliseconds at the
        rate per token of the nearest played shape by size, counted as played nowhere."""
        played = [s for s in self.first if s not in self.estimated]
        near = min(played, key=lambda s: abs(s[0] * s[1] - shape[0] * shape[1]))
        ms = self.first[near] * (shape[0] * shape[1]) / (near[0] * near[1])
        self.estimated.append(shape)
        self.first[shape] = self.repeat["eager"][shape] = self.repeat["compiled"][shape] = ms
        for side in self.timed:
            self.timed[side].append(ms)
        for key, value in (("compiles", 0), ("recorded", 0), ("stall_ms", 0.0)):
            self.found[key].append(value)

    def run(self) -> dict[str, Any]:
        """Per request, eager's and the compiled model's milliseconds (one not played at its
        shape's repeat latency), the graphs each compiled and why, the CUDA graphs it
        recorded, its stall, the requests played and those served eager."""
        found, requests = self.found, self.requests
        start = self.server_order() if self.until_compiled and self.compiled_side else 0
        for n, shape in enumerate(requests[start:], start + 1):
            if shape not in self.first and self.kept is not None and shape not in self.kept:
                self.estimate(n, shape)
                continue
            if shape not in self.first:
                self.first_arrival(n, shape)
                if self.first_by and len(self.first) == 1:
                    self.kept = self.sample()
                continue
            for side in self.timed:  # at its shape's repeat latency, as it stands now
                self.timed[side].append(self.repeat[side].get(shape))
            found["compiles"].append(0)
            found["recorded"].append(0)
            found["stall_ms"].append(0.0)
            self.revisit(n, shape)  # unless the shape runs another graph now
        for side, values in self.timed.items():
            found[f"{side}_ms"] = [self.repeat[side][s] if v is None else v
                                   for v, s in zip(values, requests, strict=True)]  # fmt: skip
        eager = self.scenario.eager_shapes
        found["ran_eager"] = [n for n, s in enumerate(requests, 1)
                              if n in self.by_stance or s in eager]  # fmt: skip
        if self.sampled:  # what the whole first pass would have taken, at the played rates
            left_out = sum(self.first[s] * self.calls(s) for s in self.estimated) / 1e3
            whole = sum(self.first[s] * self.calls(s) for s in dict.fromkeys(requests)) / 1e3
            found["sampled"] = {**self.sampled, "projected_s": whole, "estimated_s": left_out,
                                "estimated": len(self.estimated)}  # fmt: skip
        return found
