"""Deduction: what one trial proves about strategies it did not measure, and what to measure
first. Every rule here is proved by the trial it starts from, never assumed:

- **Failure implication.** A Dynamo-level failure (a graph break under ``fullgraph=True``, a
  data-dependent guard) happens while Dynamo traces, before any backend sees a graph. So the same
  granularity, ``dynamic`` and ``fullgraph`` fail with every backend, mode and option too: they
  are recorded as failed by implication, with the original reason, and never measured. A trial
  that ran with graph breaks implies the same for ``fullgraph=True``, which refuses any.
- **Equivalence.** With no recompile, ``dynamic=None`` compiled exactly as ``dynamic=False``
  would (automatic dynamic shapes only change anything at a recompile); with no graph break (and
  no block left eager), ``fullgraph=False`` compiled exactly as ``fullgraph=True`` would. The
  siblings are told the trial's measurement as a repeat.
- **Anchors first**: eager, Dynamo alone (``full/eager``), each granularity's Inductor at its
  defaults (``full`` and ``regional`` are the choices of torch's docs and of Accelerate), ``full``
  Inductor at its most effort, and ``full`` Inductor with each option alone, one strategy each, so
  the pick is never worse than those, the front starts with real points at both of its ends, and
  what each option does is seen apart from the others. **Exhaustive when cheap**: when the budget
  covers every strategy left, they are all measured, cheapest to compile first. The rest is the
  surrogate's (:mod:`.surrogate`), or with it off the sampler's, where **cheap first** breaks the
  ties.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from autotune.strategy import Strategy, batching
from autotune.trial.measurement import Measurement

ANCHORS = (
    Strategy.create("none"),
    Strategy.create("full", "eager"),  # Dynamo alone: the quickest compile there is
    Strategy.create("full"),
    Strategy.create("regional"),
    Strategy.create("nested"),
)
_BACKEND_COST = {"none": 0, "eager": 1, "aot_eager": 2, "inductor": 4}
_MODE_COST = {"lite": 0, "default": 1}
# Backends that replay the graph Dynamo captured, in Python (``eager``) or through AOTAutograd
# (``aot_eager``): they cost a trace and can never beat eager, so they never change the pick.
REPLAY = frozenset({"eager", "aot_eager"})
AT_A_LEVEL = " at a level"  # :func:`priced_as`'s name for a preset's backend


def priced_as(s: Strategy) -> str:
    """What a budget prices a strategy's compile as (:class:`autotune.search.plan.Plan`): its
    backend's, but for transformers' presets (``batching=level=N``), priced as one another:
    their warm-up compiles transformers' default 8,192-token batch (105 s for gemma-2b at two
    layers, where the same traffic's other Inductor trials took 25-60 s)."""
    return s.backend + AT_A_LEVEL if batching.level_of(s.batching) else s.backend


def pays(s: Strategy) -> bool:
    """Whether ``s`` compiles with a backend that can beat eager (not :data:`REPLAY`): under a
    time budget such a trial goes first (:meth:`autotune.search.plan.Plan.fitting`)."""
    return s.granularity != "none" and s.backend not in REPLAY


@dataclass(frozen=True)
class Tactics:
    """Which of the rules a search uses (the replay switches them one by one). Equivalence is
    off by default (``--equivalence`` turns it on): it is right, but it stops the search from
    re-measuring identical compiles, and on a CPU their noise decides the front
    (docs/benchmarks.md)."""

    anchors: bool = True
    implication: bool = True
    equivalence: bool = False
    exhaustive: bool = True
    cheap_first: bool = True
    model: bool = True  # the surrogate (:mod:`.surrogate`) picks what the anchors leave (the
    # default sampler, ``surrogate``; another sampler named turns it off)
    spread: float = 0.5  # the surrogate's prior spreads, scaled: bench/efficiency.py chose it


def cost(s: Strategy) -> tuple[int, int, int, int]:
    """A rank of how dear a strategy is to compile: backend, then mode, options, granularity."""
    granularity = {"none": 0, "full": 1, "nested": 2, "regional": 3}[s.granularity]
    mode = _MODE_COST.get(s.mode or "lite", 2)
    return _BACKEND_COST.get(s.backend, 3), mode, len(s.options), granularity


def anchors(free: Iterable[Strategy], members: Iterable[Strategy]) -> list[Strategy]:
    """The anchors among ``free``, in order: eager; transformers' continuous-batching presets
    (``batching=level=N``, a continuous workload's); Dynamo alone (``full/eager``); ``full``,
    ``regional`` and ``nested`` Inductor at its defaults; ``full`` Inductor at its most effort
    (the dearest mode and every option of the space's ``members``), the likely other end of the
    front; and ``full`` Inductor at its defaults with each option alone, which tell apart what
    each option does of what the most effort gains (they come together there). Each is one
    strategy, measured once: once they are, the anchors are done."""
    keys = {s.key for s in free}
    dear = [s for s in members if (s.granularity, s.backend, s.dynamic, s.fullgraph)
            == ("full", "inductor", None, False)]  # fmt: skip
    most = [max(dear, key=cost)] if dear else []
    full = ANCHORS[2].key
    alone = [s for s in dear if len(s.options) == 1
             and dataclasses.replace(s, options=()).key == full]  # fmt: skip
    levels = sorted((s for s in members if batching.level_of(s.batching)),
                    key=lambda s: s.batching)  # fmt: skip
    return [a for a in (ANCHORS[0], *levels, *ANCHORS[1:], *most, *alone) if a.key in keys]


def implied_failures(m: Measurement, members: Iterable[Strategy]) -> list[Strategy]:
    """The strategies that fail in Dynamo whatever their backend and options: the same
    granularity, ``dynamic`` and ``fullgraph`` as ``m`` when ``m`` failed inside Dynamo, and
    the same granularity and ``dynamic`` with ``fullgraph=True`` when ``m`` ran with graph
    breaks (``fullgraph=True`` refuses any)."""
    s = m.strategy
    if s.granularity == "none" or batching.level_of(s.batching):  # a preset: never fullgraph
        return []
    if m.ok and m.graphs is not None and m.graphs.breaks and not s.fullgraph:
        same = _traced(dataclasses.replace(s, fullgraph=True))
    elif not m.ok and m.stage == "dynamo":
        same = _traced(s)
    else:
        return []
    return [t for t in members
            if _traced(t) == same and t != s and not batching.level_of(t.batching)]  # fmt: skip


def _traced(s: Strategy) -> tuple[Any, ...]:
    """What Dynamo's tracing depends on, whatever the backend, mode and options: the
    granularity, ``dynamic``, ``fullgraph``, and a traffic's buckets, marks and stance."""
    return (s.granularity, s.dynamic, s.fullgraph, s.buckets, s.marks, s.stance)


def equivalents(m: Measurement, members: Iterable[Strategy]) -> list[Strategy]:
    """The strategies that compile exactly as ``m``'s did, as its own graphs prove."""
    s = m.strategy
    g = m.graphs
    if not m.ok or g is None or s.granularity == "none" or m.limit_hit or g.count < 1:
        return []
    whole = g.breaks == 0 and not g.eager_blocks
    fullgraphs = (False, True) if whole else (s.fullgraph,)
    static = s.dynamic in (None, False) and g.recompiles == 0
    dynamics = (None, False) if static else (s.dynamic,)
    keys = {dataclasses.replace(s, dynamic=d, fullgraph=f).key
            for d in dynamics for f in fullgraphs} - {s.key}  # fmt: skip
    return [t for t in members if t.key in keys]


def deduced(m: Measurement, target: Strategy, how: str) -> Measurement:
    """What ``target`` is told: ``m``'s failure (``implied``) or its measurement (``equivalent``),
    saying where it came from."""
    source = m.strategy.key
    if how == "implied":
        if m.ok:  # it ran with graph breaks: fullgraph=True refuses the first of them
            first = (m.graphs.break_reasons or ["?"])[0] if m.graphs else "?"
            why = f"{m.graphs.breaks if m.graphs else '?'} graph break(s), the first: {first}"
        else:
            why = m.reason
        return Measurement(
            target.to_dict(), m.model, m.workload, "failed", stage="dynamo",
            reason=f"implied by {source} (Dynamo refuses it before any backend runs): {why}",
            deduced=f"failed by implication from {source}",
        )  # fmt: skip
    s = m.strategy
    differs = {"no graph break": target.fullgraph != s.fullgraph,
               "no recompile": target.dynamic != s.dynamic}  # fmt: skip
    why = [w for w, d in differs.items() if d]
    copy = Measurement.from_dict({**m.to_dict(), "strategy": target.to_dict()})
    copy.deduced = f"same compile as {source} ({' and '.join(why)} in its trial)"
    return copy
