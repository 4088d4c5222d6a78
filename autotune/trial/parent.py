"""The parent side of a trial: one strategy measured in fresh child processes
(:mod:`autotune.trial.process`).

The cold child gets empty Inductor and Triton cache directories (so every compile is cold and
nothing is inherited). The later starts follow in children of their own
(:mod:`autotune.starts.later`): a warm start in the cold child's cache directories, a portable
start in empty ones that loads the artefact the cold child saved, and the starts that skip the
compiler (:mod:`autotune.starts.precompiled`). The pick's confirmation runs here too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from autotune.errors import NotApplicable
from autotune.start_kinds import AHEAD
from autotune.starts import artifact, precompiled
from autotune.starts.later import (
    BRIEF_ITERS,
    LATENCY_TOLERANCE,
    PROBES_SHOWN_S,
    hit_note,
    no_cache,
)
from autotune.strategy import Strategy
from autotune.trial import auto_buckets, auto_padding
from autotune.trial.measurement import Measurement, Start
from autotune.trial.process import run_child
from autotune.trial.reference import Reference, make
from autotune.trial.request import Request, judged_by
from autotune.workload import Settings, Workload

if TYPE_CHECKING:
    from autotune.catalog import ModelRef
    from autotune.trial.rungs import Rung


def cache_folder(keep: str, key: str) -> str:
    """Where the kept compile caches of the strategy ``key`` live under ``keep``."""
    return os.path.join(keep, artifact.sha256(key.encode())[:16])


def measure(
    model: ModelRef, workload: Workload, strategy: Strategy, settings: Settings | None = None
) -> Measurement:
    """Measure ``strategy`` on ``model`` and ``workload``: cold, in a fresh process with empty
    compile caches, then each later start of ``settings.starts`` in a fresh process of its own.
    Outputs are judged against a higher-precision reference computed first.

    Bad input raises ``ConfigError``; everything that goes wrong in a child is a status.
    """
    return run_trial(model, workload, strategy, settings)


def run_trial(
    model: ModelRef, workload: Workload, strategy: Strategy, settings: Settings | None = None,
    reference: Reference | None = None, later: Callable[[Measurement], bool] | None = None,
    keep: str | None = None, rung: Rung | None = None,
) -> Measurement:  # fmt: skip
    """:func:`measure`, as a search runs it: measure ``strategy`` cold in a fresh process, then
    its warm and portable starts (``settings.starts``) in fresh processes of their own, unless
    ``later`` says, from the cold measurement, that they are not needed. Outputs are judged
    against ``reference`` (computed first, in a process of its own, when not given; eager
    needs none). With ``keep``, the cold start's compile caches of a strategy that ``later``
    wants are kept there, in a folder of its own (a confirmation starts warm from them). With
    ``rung``, the cold start stops after a cheap rung where it cannot reach the front
    (:mod:`autotune.trial.rungs`); the later starts never do.

    Bad input raises ``ConfigError``; everything that goes wrong in a child is a status.
    """
    settings = settings or Settings()
    base = (strategy.to_dict(), model.to_dict(), workload.to_dict())
    try:
        strategy.check_applicable(workload.device)
    except NotApplicable as exc:
        return Measurement(*base, "not-applicable", reason=str(exc))
    if reference is None and strategy.granularity != "none":
        reference = make(model, workload, settings)
    work = tempfile.mkdtemp(prefix="autotune-trial-")
    try:
        strategy, auto = auto_buckets.edges_for(
            model, workload, strategy, settings, reference, work
        )
        if auto is None:
            strategy, auto = auto_padding.intervals_for(
                model, workload, strategy, settings, reference, work
            )
    except ValueError as exc:
        shutil.rmtree(work, ignore_errors=True)
        chose = f"buckets {strategy.buckets}" if strategy.buckets != "none" else "pad=auto"
        return Measurement(*base, "failed", reason=f"{chose}: {exc}")
    request = Request.trial(model, workload, strategy, settings, reference)
    if rung is not None:
        request = request.but(rung=rung.rounds, front=rung.front)
    saved = os.path.join(work, "cache.bin")
    cold_caches, empty_caches = os.path.join(work, "cold"), os.path.join(work, "portable")
    built = {
        k: os.path.join(work, f"built{precompiled.SUFFIX[k]}")
        for k in settings.starts
        if k in AHEAD and not precompiled.not_applicable(k, strategy, workload.kind, 0)
    }
    try:
        caching = not no_cache(strategy)
        cold = request.but(save_artifact=saved if caching else None, build_ahead=built)
        result = run_child(cold, work, "cold", cold_caches, settings)
        if result.ok and result.artifact and os.path.exists(saved):
            result.artifact = artifact.keep(saved, result.artifact)
        for kind, path in built.items():  # kept by checksum, for export to ship
            if os.path.exists(path) and "error" not in result.precompiled.get(kind, {"error": ""}):
                result.precompiled[kind] = artifact.keep(
                    path, result.precompiled[kind], precompiled.SUFFIX[kind]
                )
        brief = request.but(iters=min(settings.iters, BRIEF_ITERS), warmup=1, rung=0, front=())

        def run(kind: str) -> Measurement:
            if kind == "warm":
                return run_child(brief, work, kind, cold_caches, settings)
            if kind in built:  # empty caches: the artefact is all it has
                loading = brief.but(load_ahead=(kind, built[kind]))
                return run_child(loading, work, kind, os.path.join(work, kind), settings)
            portable = brief.but(load_artifact=saved)
            return run_child(portable, work, kind, empty_caches, settings)

        if auto is not None and result.traffic is not None:
            result.traffic["auto"] = auto_buckets.measured(result, auto)
        needed = later is None or not result.ok or later(result)
        result.starts = later_starts(result, strategy, settings.starts, run, needed)
        if keep and needed and result.ok and not no_cache(strategy):
            shutil.copytree(cold_caches, cache_folder(keep, strategy.key), dirs_exist_ok=True)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def confirm(
    model: ModelRef, workload: Workload, strategies: list[Strategy], settings: Settings,
    kept: list[str],
) -> Measurement:  # fmt: skip
    """Time ``strategies`` and eager in ``settings.iters`` interleaved rounds in one fresh
    process, its caches the merge of the ``kept`` cache folders (a warm compile where they
    hold the strategy's); the measurement's ``rounds`` holds the milliseconds per round.
    Over a traffic, each strategy in a process of its own (:func:`confirm_apart`)."""
    if workload.traffic:
        return confirm_apart(model, workload, strategies, settings, kept)
    work = tempfile.mkdtemp(prefix="autotune-confirm-")
    try:
        merged = os.path.join(work, "caches")
        os.makedirs(merged)
        for folder in kept:
            if os.path.isdir(folder):
                shutil.copytree(folder, merged, dirs_exist_ok=True)
        request = Request("confirm", strategies[0], model, workload, settings.iters,
                          settings.warmup, settings.seed, confirm=tuple(strategies),
                          deadline=settings.deadline, least=settings.least,
                          steady=settings.steady)  # fmt: skip
        return run_child(request, work, "confirm", merged, settings)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def confirm_apart(
    model: ModelRef, workload: Workload, strategies: list[Strategy], settings: Settings,
    kept: list[str],
) -> Measurement:  # fmt: skip
    """A traffic's confirmation: each strategy timed by a trial of its own in a fresh process
    (warm from its kept caches), as its trial measured it: the first pass over the traffic,
    then ``settings.iters`` rounds of the steady state against eager, none cut short but where
    no more rounds could show it faster than eager (then "not shown" is what all would say). Rivals
    apart share no code object, so no recompile budget and no graph. The rounds come back on
    one scale: each strategy's round ``i`` times the ratio to its own process's eager round
    ``i``, against a constant eager (its first process's median), so that a sign test against
    eager reads each process's own pairs, and one between strategies their ratios."""
    import statistics

    found: dict[str, list[float]] = {}
    passes: dict[str, Any] = {}  # each strategy's first pass in its confirmation, in brief
    for n, strategy in enumerate(strategies):
        work = tempfile.mkdtemp(prefix="autotune-confirm-")
        try:
            caches = os.path.join(work, "caches")
            if n < len(kept) and os.path.isdir(kept[n]):
                shutil.copytree(kept[n], caches)
            request = Request("confirm", strategy, model, workload, settings.iters,
                              settings.warmup, settings.seed, confirm=(strategy,),
                              deadline=settings.deadline, least=settings.least,
                              steady=settings.steady)  # fmt: skip
            m = run_child(request, work, "confirm", caches, settings)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if not m.ok or not m.rounds:
            return m
        t = m.traffic or {}
        passes[strategy.key] = {"compiles": sum(t.get("compiles", [])),
                                "ran_eager": t.get("ran_eager", [])}  # fmt: skip
        eager, own = m.rounds["none"], m.rounds[strategy.key]
        base = found.setdefault("none", [statistics.median(eager)])[0]
        found[strategy.key] = [c * base / e for c, e in zip(own, eager, strict=True)]
    # as long as the longest: a strategy that no more rounds could show stopped early
    found["none"] *= max(len(v) for k, v in found.items() if k != "none")
    return Measurement(*Request("confirm", strategies[0], model, workload,
                                confirm=tuple(strategies)).base(), "ok", rounds=found,
                       traffic=passes)  # fmt: skip


def portable(
    model: ModelRef, workload: Workload, strategy: Strategy, artefact: str, settings: Settings
) -> Measurement:
    """A portable start of ``strategy`` from the cache ``artefact`` a ``best.json`` ships: a
    fresh process with empty compile caches loads it, then compiles (its ``compile_s`` is the
    start's cost, the load included; its cache counters say whether it hit)."""
    work = tempfile.mkdtemp(prefix="autotune-portable-")
    try:
        request = Request.trial(model, workload, strategy, settings).but(
            iters=min(settings.iters, BRIEF_ITERS), warmup=1, load_artifact=artefact
        )
        return run_child(request, work, "portable", os.path.join(work, "caches"), settings)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def serve(
    model: ModelRef, workload: Workload, strategy: Strategy, exported: str, settings: Settings,
    kept: str | None = None, reference: Reference | None = None,
) -> Measurement:  # fmt: skip
    """Serve ``workload``'s traffic through the ``exported`` file of ``strategy`` in a plain
    loop, in a fresh process (warm from the ``kept`` caches of its trial, where there are
    any), outputs judged against ``reference`` (:mod:`autotune.trial.server_loop`)."""
    work = tempfile.mkdtemp(prefix="autotune-serve-")
    try:
        caches = os.path.join(work, "caches")
        if kept and os.path.isdir(kept):
            shutil.copytree(kept, caches)
        request = Request("serve", strategy, model, workload, seed=settings.seed,
                          tolerance=settings.tolerance, exported=exported,
                          **judged_by(reference))  # fmt: skip
        return run_child(request, work, "serve", caches, settings)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def start_of(kind: str, m: Measurement, cold: Measurement | None = None) -> Start:
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


def later_starts(
    cold: Measurement, strategy: Strategy, wanted: Sequence[str],
    run: Callable[[str], Measurement], needed: bool = True,
) -> dict[str, Start]:  # fmt: skip
    """Every wanted start of an ok cold trial; ``run(kind)`` measures one in a fresh child.
    Not ``needed``: the later starts are recorded as skipped, and cost nothing."""
    if not cold.ok:
        return {}
    found = {"cold": start_of("cold", cold)}
    rest = [k for k in wanted if k not in ("cold", *AHEAD)]
    for kind in (k for k in wanted if k in AHEAD):
        breaks = cold.graphs.breaks if cold.graphs else 0
        work = cold.workload.kind if cold.workload else "inference"
        why = precompiled.not_applicable(kind, strategy, work, breaks)
        built = cold.precompiled.get(kind) or {}
        broken = "" if why else built.get("error", "")
        if why or broken or not needed:  # a build that failed costs only its own start
            failed = built.get("status", "failed")  # or timeout, crashed: process.unbuilt
            status = "not-applicable" if why else failed if broken else "skipped"
            found[kind] = Start(kind, status, measured=False, note=why or broken or SKIPPED)
        else:
            found[kind] = start_of(kind, run(kind), cold)
    if not needed and not no_cache(strategy):
        return {**found, **{k: Start(k, "skipped", measured=False, note=SKIPPED) for k in rest}}
    if why := no_cache(strategy):
        for kind in rest:
            found[kind] = Start(
                kind, compile_s=cold.compile_s, cache=cold.cache, phases=cold.phases,
                measured=False, note=why,
            )  # fmt: skip
        return found
    for kind in rest:
        if kind == "portable" and not (cold.artifact and cold.artifact.get("bytes")):
            found[kind] = Start(kind, "failed", note="the cold start saved no cache artefact")
            continue
        found[kind] = start_of(kind, run(kind), cold)
    return found
