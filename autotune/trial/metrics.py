"""What a trial collects besides time, memory and accuracy: dynamo's records (graphs, breaks,
recompiles, compile phases, a recompile limit hit, the stage a failure arose in)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from autotune.errors import shorten
from autotune.trial.measurement import Graphs

_REASON_CHARS = 400


def _short(reason: str) -> str:
    return shorten(reason, _REASON_CHARS)


def graphs() -> Graphs:
    """Graphs, graph breaks and recompiles that dynamo recorded in this process."""
    from torch._dynamo.utils import counters, get_compilation_metrics

    breaks = counters["graph_break"]
    recompiles = [m.recompile_reason for m in get_compilation_metrics() if m.recompile_reason]
    return Graphs(
        count=int(counters["stats"]["unique_graphs"]),
        breaks=int(sum(breaks.values())),
        break_reasons=[_short(r) for r in breaks],
        recompiles=len(recompiles),
        recompile_reasons=sorted({_short(r) for r in recompiles}),
    )


def cudagraph_skipped(found: list[tuple[str, str]]) -> list[str]:
    """Each compiled graph (a region) that Inductor ran without CUDA graphs, once, with the
    first reason it gave: ``graph ID function (file:line): reason``, or ``at run time: reason``
    for a fallback it decided while running. ``found``: (compile id, reason) pairs, as
    :func:`autotune.trial.cudagraph_logs.cudagraph_skips` reads them."""
    from torch._dynamo.utils import get_compilation_metrics

    names: dict[str, str] = {}
    for m in get_compilation_metrics():
        if m.co_name:
            where = f"{m.co_name} ({os.path.basename(m.co_filename or '?')}:{m.co_firstlineno})"
            names[str(m.compile_id)] = where  # the latest: ids start again after a reset
    seen: set[str] = set()
    lines = []
    for compile_id, reason in found:
        if (compile_id or reason) in seen:
            continue
        seen.add(compile_id or reason)
        where = f"graph {compile_id} {names.get(compile_id, '?')}" if compile_id else "at run time"
        lines.append(f"{where}: {_short(reason)}")
    return lines


def phases() -> dict[str, float]:
    """Compile time split by phase (seconds), from torch's compilation metrics where recorded."""
    from torch._dynamo.utils import get_compilation_metrics

    totals: dict[str, float] = {}

    def add(name: str, value: float | None) -> None:
        if value:
            totals[name] = totals.get(name, 0.0) + value

    for m in get_compilation_metrics():
        add("total_s", m.entire_frame_compile_time_s)
        add("backend_s", m.backend_compile_time_s)
        us = 1e-6
        add("aot_autograd_s", (m.aot_autograd_cumulative_compile_time_us or 0) * us)
        add("inductor_s", (m.inductor_cumulative_compile_time_us or 0) * us)
        add("codegen_s", (m.inductor_code_gen_cumulative_compile_time_us or 0) * us)
        add("backward_s", (m.backward_cumulative_compile_time_us or 0) * us)
    if "total_s" in totals:
        totals["dynamo_s"] = totals["total_s"] - totals.get("backend_s", 0.0)
    return totals


def _dynamo_failures() -> tuple[type[BaseException], ...]:
    from torch._dynamo import exc as dynamo

    return dynamo.Unsupported, dynamo.UserError, dynamo.InternalTorchDynamoError


def failure_stage(exc: BaseException) -> str:
    """``dynamo`` when Dynamo itself failed while tracing (a graph break under
    ``fullgraph=True``, a data-dependent guard, an internal error), before any backend saw a
    graph; else ``""``. A backend's own failure arrives wrapped in ``BackendCompilerFailed``.

    torch has no public API for this: it reads ``torch._dynamo.exc``'s classes, and
    ``test_failure_stage_reads_dynamo_s_exceptions`` (``tests/search/test_deduction.py``) fails
    loudly when they change."""
    from torch._dynamo import exc as dynamo

    if isinstance(exc, dynamo.BackendCompilerFailed):
        return ""
    return "dynamo" if isinstance(exc, _dynamo_failures()) else ""


def failure_stage_of(reason: str) -> str:
    """:func:`failure_stage` from a stored reason (``TypeName: message``), for measurements
    recorded before the stage was."""
    return "dynamo" if reason.split(":")[0] in {c.__name__ for c in _dynamo_failures()} else ""


LIMIT_FAILURE = "Dynamo recompile limit exceeded"


RECORDS = 1_000_000  # dynamo keeps its last 64 compilation records unless told otherwise


def records() -> list[Any]:
    """Dynamo's compilation records in this process, none dropped from here on (it keeps the
    last 64 by default: a traffic's first pass can compile more)."""
    from torch._dynamo import utils

    global _KEEPING
    if not _KEEPING:
        utils.set_compilation_metrics_limit(RECORDS)
        _KEEPING = True
    return list(utils.get_compilation_metrics())


_KEEPING = False


def compile_counts() -> tuple[int, int, list[str]]:
    """So far in this process: graphs compiled (dynamo's own counter, which drops nothing),
    recompile-limit failures, and the recompile reasons, from the same private records as
    :func:`limit_hits` (the same test guards them). A traffic's first pass reads them around
    each request."""
    from torch._dynamo.utils import counters

    found = records()
    limits = sum(1 for m in found if (m.fail_reason or "").startswith(LIMIT_FAILURE))
    reasons = [_short(m.recompile_reason) for m in found if m.recompile_reason]
    return int(counters["stats"]["unique_graphs"]), limits, reasons


@contextlib.contextmanager
def around_compiles(start: Callable[[], None], end: Callable[[], None]) -> Iterator[None]:
    """Call ``start`` as each Dynamo compile begins and ``end`` as it ends, while in the
    block. torch has no public API for this: it registers Dynamo's own compile callbacks
    (``torch._dynamo.callback_handler``), and ``test_around_compiles_reads_dynamo_s_callbacks``
    fails loudly when they change."""
    import torch._dynamo

    handler = torch._dynamo.callback_handler

    def began(_: Any) -> None:
        start()

    def ended(_: Any) -> None:
        end()

    handler.register_start_callback(began)
    handler.register_end_callback(ended)
    try:
        yield
    finally:
        handler.remove_start_callback(began)
        handler.remove_end_callback(ended)


def limit_hits() -> list[dict[str, Any]]:
    """Code objects on which dynamo hit a recompile limit (and then ran them eager).

    Each: ``function`` (name, file:line), ``limit_type`` (``recompile_limit`` or
    ``accumulated_recompile_limit``), ``limit`` (its value), ``graphs`` (compiled before the hit)
    and ``reason`` (the guard that failed last, with torch's hint). torch has no public API for
    this: it reads the private compilation metrics, and a test in ``tests/trial/test_generate.py``
    (``test_limit_hits_reads_dynamo_records_in_process``) fails loudly when their shape changes.
    """
    import torch._dynamo
    from torch._dynamo.utils import get_compilation_metrics

    records = list(get_compilation_metrics())
    names: dict[str, str] = {}
    compiled: dict[str, int] = {}
    for m in records:
        frame = str(m.compile_id).split("/")[0]
        if m.co_name:
            names.setdefault(frame, f"{m.co_name} ({m.co_filename}:{m.co_firstlineno})")
        if m.fail_type is None and m.co_name:
            compiled[frame] = compiled.get(frame, 0) + 1
    hits = []
    for m in records:
        if not (m.fail_reason or "").startswith(LIMIT_FAILURE):
            continue
        frame = str(m.compile_id).split("/")[0]
        found = re.search(r"Limit type: (\w+)", m.fail_reason)
        limit_type = found.group(1) if found else "recompile_limit"
        hits.append({
            "function": names.get(frame, "?"),
            "limit_type": limit_type,
            "limit": int(getattr(torch._dynamo.config, limit_type, 0)),
            "graphs": compiled.get(frame, 0),
            "reason": m.recompile_reason or "",
        })  # fmt: skip
    return hits


def cpu_seconds() -> tuple[float, float] | None:
    """The whole machine's busy CPU seconds so far (``/proc/stat``), and those of this process
    and every process below it (Inductor's compile workers, say: ``/proc/PID/stat``, with
    their reaped children's); None where there is no ``/proc``."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    parent, spent = {}, {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:  # gone meanwhile
            continue
        rest = text[
            text.rfind(")") + 2 :
        ].split()  # after the command's name, which may hold spaces
        parent[pid] = int(rest[1])
        spent[pid] = sum(int(v) for v in rest[11:15])  # utime, stime, cutime, cstime
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        here = frontier.pop()
        for pid, ppid in parent.items():
            if ppid == here and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return busy / ticks, sum(spent.get(p, 0) for p in tree) / ticks


LOADED = 0.25  # of the CPU, taken by other processes during a trial's rounds: under load
# Eager's rounds over its first call: a first call is the slowest where nothing competes (its
# caches cold); rounds that read past twice it (and past their own spread) were contended. A
# trial beside other jobs read eager's TTFT at 3.0 ms in its first pass and 236 ms in its rounds.
CONTENDED = 2.0


def pin_threads() -> int:
    """torch's threads for this trial, the same for both sides: ``OMP_NUM_THREADS`` where
    given, else torch's own count capped at the CPUs this process may run on (a container's
    or ``taskset``'s share: more threads than that contend with each other); set, and said."""
    import torch

    given = os.environ.get("OMP_NUM_THREADS", "")
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    threads = int(given) if given.isdigit() and int(given) > 0 else torch.get_num_threads()
    if not given and allowed:
        threads = min(threads, allowed)
    torch.set_num_threads(threads)
    return threads


def contended(first_s: float, rounds_ms: list[float]) -> float | None:
    """How many times eager's first call its timed rounds read (median), where that is past
    :data:`CONTENDED` and their own spread: the rounds were taken under contention, whatever
    :func:`others_cpu` read; None where they were not."""
    import statistics

    if first_s <= 0 or len(rounds_ms) < 2:
        return None
    median = statistics.median(rounds_ms)
    q = statistics.quantiles(rounds_ms, n=4)
    ratio = median / (first_s * 1e3)
    return ratio if ratio > CONTENDED + (q[2] - q[0]) / median else None


# /proc counts CPU time in ticks of 10 ms: over a window of 13 ms one tick of another process
# read as 38 % of two cores; over a second, as 0.5 %
WINDOW_S = 1.0


@contextlib.contextmanager
def others_cpu() -> Iterator[dict[str, float]]:
    """Yield a dict that, after the block, holds ``share``: how much of the machine's CPU
    other processes (not this one, nor any below it) took during it (0 to 1, of every
    core), so that latency figures taken under load can be said to be; nothing for a block
    shorter than :data:`WINDOW_S`, whose reading would be the ticks' rounding."""
    import time

    found: dict[str, float] = {}
    start, began = cpu_seconds(), time.perf_counter()
    yield found
    end, wall = cpu_seconds(), time.perf_counter() - began
    if start is None or end is None or wall < WINDOW_S:
        return
    others = (end[0] - start[0]) - (end[1] - start[1])
    found["share"] = max(0.0, min(1.0, others / (wall * (os.cpu_count() or 1))))
