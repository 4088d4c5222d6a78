"""Starts: what compiling a strategy costs at a service's first and every later start.

- ``cold``: a fresh process with empty compile caches (the trial itself);
- ``warm``: a second fresh process that reuses the cold one's cache directories, as a
  restart on the same machine does;
- ``portable``: a third fresh process with empty cache directories that first loads the
  artefact the cold one saved (``torch.compiler.load_cache_artifacts``), as a new machine or
  container does; the load counts in its cost;
- ``precompiled`` and ``aot``: fresh processes with empty caches that load a precompiled
  function or an AOTInductor package the cold one built, and skip the compiler
  (:mod:`autotune.starts.precompiled`); the load counts in their cost.

The parent (:mod:`autotune.trial.parent`) starts the processes; this module decides which
starts run, reads each child's cache counters, and turns its measurement into a
:class:`Start`. Backends without a cache that outlives the process (eager, aot_eager, your
own) get warm = portable = cold, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from autotune.starts.kinds import AHEAD
from autotune.strategy.strategy import Strategy
from autotune.trial.measurement import Measurement, Start

CACHING_BACKENDS = ("inductor",)
BRIEF_ITERS = 10  # interleaved rounds that time a warm or portable start's latency
PROBES_SHOWN_S = 0.5  # ISA probes longer than this are named in a start's note
LATENCY_TOLERANCE = 0.25  # a start whose speedup differs from cold's by more says so

# torch._dynamo.utils.counters: private, so read in cache_counters() alone (see its test)
COUNTERS = {
    "inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass"),
    "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass"),
}


def cache_counters() -> dict[str, int]:
    """This process's compile-cache hits, misses and bypasses (Dynamo's private counters)."""
    from torch._dynamo.utils import counters

    return {name: int(counters[group][name]) for group, names in COUNTERS.items()
            for name in names}  # fmt: skip


def no_cache(strategy: Strategy) -> str:
    """Why a strategy's later starts cost its cold compile again ("" when it caches)."""
    if strategy.granularity == "none":
        return "eager compiles nothing"
    if strategy.backend not in CACHING_BACKENDS:
        return (f"backend {strategy.backend!r} keeps no compile cache across processes, so "
                "every start compiles cold")  # fmt: skip
    return ""


def hit_note(kind: str, cache: dict[str, int]) -> str:
    """What a warm or portable start's counters say, when they do not say "all hit"."""
    hits = cache.get("fxgraph_cache_hit", 0)
    misses = cache.get("fxgraph_cache_miss", 0) + cache.get("fxgraph_cache_bypass", 0)
    if hits and not misses:
        return ""
    if hits:
        return f"{kind} start hit the FX graph cache only partly ({hits} hits, {misses} misses)"
    return f"{kind} start missed the FX graph cache ({misses} misses): it compiled cold"


def of(kind: str, m: Measurement, cold: Measurement | None = None) -> Start:
    """A start as the child that ran it measured it (``cold``: the trial for comparison)."""
    if not m.ok:
        return Start(kind, m.status, note=m.reason, wall_s=m.wall_s)
    load_s, probes = m.load_s or 0.0, m.timings.get("isa_probes_s", 0.0)
    start = Start(
        kind, compile_s=(m.compile_s or 0.0) + load_s, load_s=load_s, cache=m.cache,
        phases={**m.phases, **({"isa_probes_s": probes} if probes else {})}, wall_s=m.wall_s,
    )  # fmt: skip
    if cold is None:
        return start
    start.latency, start.eager_latency, start.speedup = m.latency, m.eager_latency, m.speedup
    frames = int(m.timings.get("frames_compiled", 0))
    skips = kind in AHEAD
    notes = [f"{kind} start compiled {frames} frame(s): it did not skip the compiler"
             if frames else ""] if skips else [hit_note(kind, m.cache)]  # fmt: skip
    if probes > PROBES_SHOWN_S:
        notes.append(f"{probes:.1f} s of its load were Inductor's ISA probes with the host "
                     "compiler (pytorch/pytorch#191715; TORCHINDUCTOR_VEC_ISA_OK=1 skips most of "
                     "them)")  # fmt: skip
    if m.accuracy is not None and not m.accuracy.passed:
        notes.append(f"{kind} start gave wrong answers: {m.accuracy.detail}")
    if cold.speedup and m.speedup and abs(m.speedup / cold.speedup - 1) > LATENCY_TOLERANCE:
        notes.append(f"{kind} start ran at {m.speedup:.2f}x eager, cold at {cold.speedup:.2f}x")
    start.note = "; ".join(n for n in notes if n)
    return start


SKIPPED = ("not measured: not a contender (off the front, not among the fastest), and no "
           "objective or policy needs it")  # fmt: skip


def later(
    cold: Measurement, strategy: Strategy, wanted: Sequence[str],
    run: Callable[[str], Measurement], needed: bool = True,
) -> dict[str, Start]:  # fmt: skip
    """Every wanted start of an ok cold trial; ``run(kind)`` measures one in a fresh child.
    Not ``needed``: the later starts are recorded as skipped, and cost nothing."""
    from autotune.starts import precompiled as ahead

    if not cold.ok:
        return {}
    starts = {"cold": of("cold", cold)}
    later = [k for k in wanted if k not in ("cold", *AHEAD)]
    for kind in (k for k in wanted if k in AHEAD):
        breaks = cold.graphs.breaks if cold.graphs else 0
        why = ahead.not_applicable(kind, strategy, cold.workload.get("kind", "inference"), breaks)
        why = why or (cold.ahead.get(kind) or {}).get("error", "")
        if why or not needed:
            starts[kind] = Start(kind, "not-applicable" if why else "skipped", measured=False,
                                 note=why or SKIPPED)  # fmt: skip
        else:
            starts[kind] = of(kind, run(kind), cold)
    if not needed and not no_cache(strategy):
        return {**starts, **{k: Start(k, "skipped", measured=False, note=SKIPPED) for k in later}}
    if why := no_cache(strategy):
        for kind in later:
            starts[kind] = Start(
                kind, compile_s=cold.compile_s, cache=cold.cache, phases=cold.phases,
                measured=False, note=why,
            )  # fmt: skip
        return starts
    for kind in later:
        if kind == "portable" and not (cold.artifact and cold.artifact.get("bytes")):
            starts[kind] = Start(kind, "failed", note="the cold start saved no cache artefact")
            continue
        starts[kind] = of(kind, run(kind), cold)
    return starts
