"""Cheap rungs: a compiled trial times a few rounds first, and stops there when its strategy
cannot reach the front.

Multi-fidelity with a rung *inside* the trial, not across trials. A trial's cost is mostly its
cold compile, paid once its process has compiled, whatever follows; what a low fidelity can
save is the timed rounds after it (and over a traffic each round times every steady shape on
both sides). Successive halving across trials would run the cheap rung in one process and the
full rounds of the survivors in another, paying each survivor's cold compile twice; Optuna's
pruners cannot serve either way: ``Trial.report`` and ``Trial.should_prune`` raise
``NotImplementedError`` in a multi-objective study (optuna 5.0, ``optuna/trial/_trial.py``),
and a study minimises compile time and latency together.

So the parent hands the child the study's front so far (:func:`handed`: each point's compile
time, the speedup its rounds showed, its memory where that is an objective), and after
:attr:`Rung.rounds` interleaved rounds (the sign test's deciding rounds) the child asks
:meth:`Rung.verdict`: is this strategy's most hopeful outcome already dominated? Its compile
time is known exactly by then (it is the first call), its peak memory too (the warm-up's);
its speedup is bounded above by the largest eager/compiled ratio of its rounds: each round
is a pair timed back to back, and all of ``n`` rounds fall below the median ratio with
probability ``2**-n`` (1.6 % at 6), so the bound errs that rarely, and on the side of going on.
A speedup never counts below 1 (rounds that do not show one count as none). A strategy
whose bound a front point with no slower compile (and no more memory) matches is stopped: its
measurement is stored at the cheap fidelity (``Measurement.rung == "cheap"``), which no policy
may pick and no confirmation times (:func:`autotune.choice.selection.candidates`). Any other
goes on to the full rounds in the same process, its cheap rounds counted among them
(``rung == "full"``).

Over a traffic the cheap rung times a sample of the steady shapes (:data:`SHAPES`, quantiles
that keep the traffic's mix) in rounds of its own; a strategy that goes on then times the full
steady state. The confirmation is never cut: it is no trial of a search.

Rungs apply where the front bounds the pick: a cold start's cost, a call's latency (decode's
for a generation) and optionally memory, under any policy but ``restarts`` (it counts later
starts, which the cheap rung has not measured). ``--rungs full`` turns them off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

RUNGS = ("cheap", "full")  # --rungs: a cheap rung first (the default), or every trial full
SHAPES = 3  # a traffic's steady shapes the cheap rung times (when the full rounds time more)
FrontPoint = tuple[float, float, float | None]  # compile_s, the speedup shown, memory (or None)


def applies(objectives: Sequence[str], policy: str) -> bool:
    """Whether a cheap rung can tell what cannot reach the front: the objectives are a cold
    start, a call's latency and optionally memory, and the policy picks on the front."""
    known = {"compile", "latency", "decode", "memory"}
    return set(objectives) <= known and not policy.startswith("restarts")


def wanted(rungs: str, objectives: Sequence[str], policy: str) -> bool:
    """Whether a search's compiled trials time a cheap rung first: ``--rungs cheap`` (the
    default), where it :func:`applies`."""
    return rungs == "cheap" and applies(objectives, policy)


def handed(front: Sequence[Any], objectives: Sequence[str]) -> tuple[FrontPoint, ...]:
    """What the child needs of the front's points (:class:`autotune.choice.selection.Point`, a
    later stage's): each one's compile time, the speedup its rounds showed (1 where they showed
    none, and for eager), and its peak memory where memory is an objective."""
    memory = "memory" in objectives
    return tuple(
        (p.compile_s, p.speedup if p.significant else 1.0, p.memory_mb if memory else None)
        for p in front
    )


def bound(eager_s: Sequence[float], compiled_s: Sequence[float]) -> float:
    """The most hopeful speedup the rounds allow: their largest eager/compiled ratio, never
    below 1 (see the module's docstring)."""
    ratios = [e / c for e, c in zip(eager_s, compiled_s, strict=False) if c > 0]
    return max([1.0, *ratios])


@dataclass(frozen=True)
class Rung:
    """A trial's cheap rung: its rounds, and the front it must be able to reach."""

    rounds: int
    front: tuple[FrontPoint, ...]

    @classmethod
    def of(cls, request: Any) -> Rung | None:
        """The rung a trial request asks for (None: every round at full fidelity)."""
        wanted = request.kind == "trial" and request.strategy.granularity != "none"
        if not (wanted and request.rung and request.front):
            return None
        return cls(request.rung, tuple(tuple(p) for p in request.front))  # type: ignore[misc]

    def verdict(self, compile_s: float, eager_s: Sequence[float], compiled_s: Sequence[float],
                memory_mb: float | None = None) -> str:  # fmt: skip
        """Why the strategy cannot reach the front ("" when it may): a front point compiles
        no slower, uses no more memory, and shows at least the speedup that is this one's
        most hopeful."""
        best = bound(eager_s, compiled_s)
        mine = (compile_s, best, memory_mb)
        for point in self.front:
            c, g, mem = point
            if point == mine or c > compile_s or g < best:
                continue
            if mem is not None and memory_mb is not None and mem > memory_mb:
                continue
            return (f"stopped after {len(compiled_s)} cheap rounds: at best {best:.3g}x eager's "
                    f"speed, and a front point compiles in {c:.3g} s (not {compile_s:.3g} s) "
                    f"at {g:.3g}x")  # fmt: skip
        return ""
