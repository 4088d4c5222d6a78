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

from autotune.strategy import Strategy

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
