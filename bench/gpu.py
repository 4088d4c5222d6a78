"""The GPU acceptance run: one command that says, on the first GPU autotune meets, whether its
CUDA paths are right, and writes one JSON report with each check's verdict and figures, from
which ``--table`` prints the GPU table of the benchmarks page. A lent machine runs 10 minutes a
call and 15 a lease, its start included, so the run comes in parts, each one call of at most 9
minutes, two a lease (:func:`lease_plan`), what changed since the last lent GPU first
(:data:`CHANGED`: the probe, checks 13 and 6, the padded prefill, ``--buckets auto``); the
whole run also passes in one process. Its first line says torch's and transformers' versions.

    python bench/gpu.py --part 1 --out a.json    # on a machine with a CUDA GPU, then --part 2...
    python bench/gpu.py                          # the whole run, in one process
    python bench/gpu.py --dry-run                # anywhere: the lease's plan, commands, models
    python bench/gpu.py --only 0,2,11 --out a.json  # some checks alone
    python bench/gpu.py --table a.json b.json    # the Markdown table of one or more reports

Checks, by number (each prints PASS or FAIL with its figures; the exit status is the count of
FAILs):

0. The probe, the lease's first step: ``autotune.apply_generation`` with ``reduce-overhead`` and
   the ``single`` and ``pow2`` caches, four ``generate`` calls of one prompt each, the CUDA
   graphs each call recorded: ``[1, 1, 0, 0]`` (decode's at the first, the prefill's at the
   second); a recording at every call is a cache made anew at each.
1. CUDA events against perf_counter after a synchronize: within 5 % (a 4096^2 matmul).
2. ``reduce-overhead`` on toy-64, full and regional: no CUDA-graph skip, a CUDA graph recorded
   in the first calls and none again in the rounds (counted from Inductor's log: the memory in
   the private pools, which a warm-up run allocates too, proved nothing), and right answers
   (torch raises on reading an output that a later replay overwrote, which fails the trial: a
   trial that ran and matched eager had none); each side's peak memory and starts.
3. llama-3.2-1b at batch 1 x 128: eager, full and regional Inductor, cold compile and latency,
   beside Accelerate's published table (full 10.7 s / 6.3 ms, regional 1.95 s / 9.7 ms, eager
   18.3 ms on an H100): how many times quicker regional compiles than full, here and there
   (fails where it is not quicker), and each one's speed-up over eager.
4. The generate workload on gemma-2b with ``reduce-overhead``: decode per token and TTFT; fails
   on a CUDA-graph fallback.
5. The generate confirmation (several strategies in one process) with ``reduce-overhead``:
   every strategy runs every round (an overwritten output would raise and end them).
6. ``autotune.apply_generation`` with ``reduce-overhead``: three ``generate`` calls, no output
   kept alive into the next, the static KV cache, no CUDA-graph fallback, each call's tokens as
   eager's under the gate's tolerance; one or two graphs recorded (decode's, the prefill's),
   none at the third call.
7. A precompiled start of a CUDA-graph strategy: refused, with why (torch would load it
   without CUDA graphs).
8. A portable start from ``best.cache.bin`` made on another device index (two GPUs or more):
   the export ships a cache artefact, and a fresh process on ``cuda:0`` with an empty Inductor
   cache, at the float32 matmul precision the docs tell users to set (``high``) and with
   autotune's warnings as errors, loads it and hits the FX graph cache with no miss.
9. ``search --workers 2 --json`` on two GPUs (two GPUs or more): its standard output is one JSON
   document, and both workers measured.
10. A traffic (``--seq-len 16..512``) with ``reduce-overhead``: plain, marks=seq, buckets=pow2
    and stance=eager_on_recompile, each with its time to ready, stalls (a CUDA graph's
    recording included), requests served eager and the compiled graphs judged, and no
    CUDA-graph fallback; then
    ``autotune.apply`` of the bucketed strategy serves keyword calls compiling each bucket once,
    with no CUDA-graph fallback.
11. Eager's peak memory beside CUDA graphs (gemma-2b, one layer, bfloat16, 1 x 128): in a
    fresh process, eager's peak read without the graphs' pools equals its peak before the
    graphs existed (within two small segments or 2 %); and a ``reduce-overhead`` trial's eager
    peak equals a plain Inductor trial's (the pool is the compiled side's alone).
12. ``search`` of a traffic (gemma-2b, one layer, ``--seq-len 16..256``) with
    ``reduce-overhead``: a compiled pick, confirmed, whose self-check serves the traffic
    through its export in a plain loop on the GPU and counts what the trial counted ("served
    as measured"); then ``autotune check best.json --measure`` gates it on the GPU and passes.
13. The generate workload over a traffic (gemma-2b, one layer, prompts 16..128 and answers
    8..32 tokens, 8 requests) with ``reduce-overhead``, with one static cache and with a cache a
    pow2 bucket and the prefill eager: every request's tokens as eager's under the gate's
    tolerance, no CUDA-graph fallback, the graphs recorded bounded from both sides (a decode
    graph a cache at least; at most that and one more, and a prefill graph a played request
    where it is compiled), none recorded again in the rounds, the weighted time per token under
    eager's and TTFT within 1.2 times eager's. Never run yet: its time is a guess.
14. The same traffic with the prefill padded to pow2 buckets and a cache a bucket, as 13.
15. A traffic (check 10's) with ``--buckets auto`` and ``reduce-overhead``: its pilot's edges,
    the predicted and measured cost, right answers, no fallback, none recorded again.
16. Continuous batching (gemma-2b, one layer, 12 requests at 8 a second) with transformers'
    own CUDA graphs on both paths (``batching=graphs=both``, Inductor): every request's
    tokens as eager's, the stalls after the warm-up, TTFT and time per token against eager's
    in the same process. The decode fast path, and its CUDA graphs, are flash attention's
    paged kernel alone: with no ``flash_attn`` installed the model keeps sdpa and the check
    says so. Never run yet: its time is a guess.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune import catalog, device  # noqa: E402
from autotune.catalog import ModelRef  # noqa: E402
from autotune.starts import precompiled  # noqa: E402
from autotune.strategy import Strategy  # noqa: E402
from autotune.trial import cudagraph_logs, metrics  # noqa: E402
from autotune.trial.parent import confirm, measure  # noqa: E402
from autotune.workload import Settings, Workload  # noqa: E402

ACCELERATE = {"none": (0.0, 18.3), "full": (10.7, 6.3), "regional": (1.95, 9.7)}  # s, ms (H100)
QUICK = Settings(iters=10, warmup=3, timeout_s=900)  # check 2: its warm and portable starts too
TIMED = Settings(iters=10, warmup=3, timeout_s=900, starts=("cold",))  # the figures' checks
COLD = Settings(iters=5, warmup=2, timeout_s=900, starts=("cold",))
OVERHEAD = Strategy.create("full", "inductor", "reduce-overhead")
GEMMA = ModelRef("gemma-2b", layers=4)  # the side paths' model: short, as they need no table
POOLED = ModelRef("gemma-2b", layers=1)  # check 11: logits of 128 x 256000 make a pool to see
POOLED_WORKLOAD = Workload(seq_len=128, dtype="bfloat16")
SEGMENT_MB = 2.0  # the caching allocator's small segment: readings move by whole segments
SAME_SHARE = 0.02  # two peaks of the same calls agree within 2 % (or two small segments)


def same_mb(a: float, b: float) -> float:
    """How far two readings of the same calls' peak may lie apart: two small segments, or 2 %
    of the larger (one more segment under another driver read 1336 against 1338 MiB, no
    margin at all at one segment)."""
    return max(2 * SEGMENT_MB, SAME_SHARE * max(a, b))


# the command lines checks 8 and 9 run, exactly as the dry run parses them
PORTABLE = ["search", "--model", "toy-64", "--device", "cuda:1", "--granularity", "full",
            "--backend", "inductor", "--mode", "default", "--options", "none", "--dynamic",
            "none", "--fullgraph", "false", "--trials", "1", "--policy", "fastest",
            "--no-progress", "--no-confirm", "--study", "elsewhere",
            "--out", "best.json"]  # fmt: skip
# check 12: a traffic searched with reduce-overhead, its pick served through its export, then gated
SERVED = ["search", "--model", "gemma-2b", "--layers", "1", "--dtype", "bfloat16", "--device",
          "cuda", "--seq-len", "16..256", "--requests", "12", "--granularity", "full",
          "--backend", "inductor", "--mode", "reduce-overhead", "--dynamic", "auto", "--options",
          "none", "--fullgraph", "false", "--buckets", "none", "--marks", "none", "--stance",
          "default", "--trials", "1", "--iters", "10", "--policy", "fastest", "--no-progress",
          "--study", "served", "--out", "best.json"]  # fmt: skip
GATE = ["check", "best.json", "--measure", "--json"]
WORKERS = ["search", "--model", "toy-64", "--device", "cuda", "--backend", "inductor,eager",
           "--granularity", "none,full,regional", "--options", "none", "--trials", "6",
           "--workers", "2", "--no-progress", "--study", "two", "--json"]  # fmt: skip


def load_command(folder: str | Path, where: str) -> list[str]:
    """The fresh process of check 8 that loads ``folder``'s export on ``where``."""
    return [sys.executable, str(Path(__file__).resolve()), "--load-portable", str(folder),
            "--device", where]  # fmt: skip


@dataclass
class Found:
    """What one check found: its lines (one starting "FAIL" fails it) and its figures."""

    lines: list[str]
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not any(line.startswith("FAIL") for line in self.lines)


@dataclass
class Check:
    """One check of the run: what it builds and which command lines it runs (for the dry
    run), and what it measures."""

    name: str
    models: list[tuple[ModelRef, Workload]]
    run: Callable[[str], Found]  # device -> what it found
    gpus: int = 1
    commands: list[list[str]] = field(default_factory=list)  # autotune's argv, or load_command


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def events_agree(where: str) -> Found:
    import torch

    x = torch.randn(4096, 4096, device=where)
    events = sorted(device.timed(lambda: x @ x, where) for _ in range(30))
    walls = sorted(device.wall(lambda: x @ x, where)[0] for _ in range(30))
    ratio = events[15] / walls[15]
    figures = {"events_ms": events[15] * 1e3, "perf_counter_ms": walls[15] * 1e3, "ratio": ratio}
    line = (f"{verdict(abs(ratio - 1) <= 0.05)} events {events[15] * 1e3:.3f} ms vs "
            f"perf_counter {walls[15] * 1e3:.3f} ms (ratio {ratio:.3f})")  # fmt: skip
    return Found([line], figures)


def memory_of(m: Any) -> dict[str, Any]:
    """A measurement's peaks (MiB), as figures."""
    mem = m.memory
    return {"eager_peak_mb": mem.eager_peak_mb if mem else None,
            "compiled_peak_mb": mem.compiled_peak_mb if mem else None,
            "compile_peak_mb": mem.compile_peak_mb if mem else None}  # fmt: skip


def graphs_lost(m: Any) -> tuple[int, str]:
    """How many compiled graphs ran without CUDA graphs (Inductor's logged fallbacks), and the
    first reason: a CUDA-graph strategy that silently ran as plain Inductor fails its check.
    A trial that recorded no graphs reading counts as one lost."""
    g = m.graphs
    if g is None:
        return 1, ": no graphs recorded in the measurement"
    return g.cudagraph_skips, f": {g.cudagraph_skip_reason[:200]}" if g.cudagraph_skips else ""


def why_failed(m: Any) -> str:
    """A failed trial's reason, saying so where torch refused to read an overwritten output."""
    if m.ok:
        return ""
    over = "overwritten" in m.reason + m.log_tail
    return f"{'an output overwritten by a later replay: ' if over else ''}{m.reason[:200]}"


def cuda_graphs(where: str) -> Found:
    lines, figures = [], {}
    for granularity in ("full", "regional"):
        strategy = Strategy.create(granularity, "inductor", "reduce-overhead")
        m = measure(ModelRef("toy-64"), Workload.create(device=where), strategy, QUICK)
        g = m.graphs
        recording = m.timings.get("cuda_graph_recording_s", 0)
        pool = m.timings.get("cuda_graph_pool_mb", 0.0)  # one pool, every graph's
        recorded, later = recordings_of(m)
        ok = m.feasible and g is not None and not g.cudagraph_skips and recorded_once(m)
        skip = f"; skips {g.cudagraph_skips}: {g.cudagraph_skip_reason}" if g else ""
        mem, right = memory_of(m), bool(m.accuracy and m.accuracy.passed)
        figures[granularity] = {
            "status": m.status, "speedup": m.speedup, "compile_s": m.compile_s,
            "recording_s": recording, "pool_mb": pool, "recorded": recorded,
            "recorded_later": later,
            "skips": g.cudagraph_skips if g else None,
            "right_answers": right, **mem,
            "starts": {k: v.status for k, v in m.starts.items()},
        }  # fmt: skip
        lines.append(f"{verdict(ok)} toy-64 {granularity} reduce-overhead: {m.status}, "
                     f"{m.speedup or 0:.2f}x, compile {m.compile_s or 0:.1f} s ({recorded} "
                     f"CUDA graphs recorded in {recording:.2f} s, {later} after; one pool "
                     f"of {pool:.0f} MiB, all graphs'){skip}; answers right: "
                     f"{right}; peak eager "
                     f"{mem['eager_peak_mb'] or 0:.0f} MiB, compiled "
                     f"{mem['compiled_peak_mb'] or 0:.0f} MiB; starts "
                     f"{figures[granularity]['starts']} {why_failed(m)}")  # fmt: skip
    return Found(lines, figures)


def recordings_of(m: Any) -> tuple[int, int]:
    """The CUDA graphs a trial recorded in its first calls, and after them (in its warm-up and
    timed rounds, which repeat the first calls' shapes), as Inductor logged them."""
    return (int(m.timings.get("cuda_graph_recordings", 0)),
            int(m.timings.get("cuda_graph_recordings_later", 0)))  # fmt: skip


def recorded_once(m: Any) -> bool:
    """Check 2: the first calls recorded a CUDA graph, and the rounds recorded none again. Not
    the memory in the private pools: the warm-up run that comes before a recording allocates
    there too, so a pool with no recording passed."""
    recorded, later = recordings_of(m)
    return recorded >= 1 and later == 0


def llama_table(where: str) -> Found:
    ref = ModelRef("llama-3.2-1b")
    workload = Workload.create(device=where, seq_len=128, dtype="bfloat16")
    lines = [
        "| strategy | cold compile | latency | Accelerate's (H100) |",
        "| --- | --- | --- | --- |",
    ]
    figures: dict[str, Any] = {}
    for granularity in ("none", "full", "regional"):
        m = measure(ref, workload, Strategy.create(granularity, "inductor"), TIMED)
        theirs = ACCELERATE[granularity]
        ms = m.latency.median_ms if m.latency else float("nan")
        figures[granularity] = {"compile_s": m.compile_s, "latency_ms": ms,
                                "accelerate_s_ms": list(theirs)}  # fmt: skip
        lines.append(f"| {granularity} | {m.compile_s or 0:.2f} s | {ms:.2f} ms | {theirs[0]} s "
                     f"/ {theirs[1]} ms |")  # fmt: skip
        if not m.feasible:
            lines.append(f"FAIL llama-3.2-1b {granularity}: {m.status} {m.reason[:300]}")
    figures["beside_accelerate"] = beside_accelerate(figures)
    lines.append(beside_accelerate_line(figures["beside_accelerate"]))
    return Found(lines, figures)


def beside_accelerate(found: dict[str, Any]) -> dict[str, float]:
    """Check 3's comparison with Accelerate's published table, as figures that hold across
    machines: how many times quicker regional compiles than full, and each one's speed-up
    over eager, here and there."""

    def ratio(a: float | None, b: float | None) -> float:
        return a / b if a and b else float("nan")

    here = {g: (found[g]["compile_s"], found[g]["latency_ms"]) for g in ACCELERATE}
    return {
        "regional_compiles_quicker": ratio(here["full"][0], here["regional"][0]),
        "accelerate_regional_compiles_quicker": ratio(ACCELERATE["full"][0],
                                                      ACCELERATE["regional"][0]),
        **{f"{g}_speedup": ratio(here["none"][1], here[g][1]) for g in ("full", "regional")},
        **{f"accelerate_{g}_speedup": ratio(ACCELERATE["none"][1], ACCELERATE[g][1])
           for g in ("full", "regional")},
    }  # fmt: skip


def beside_accelerate_line(b: dict[str, float]) -> str:
    """Passes where regional compiles quicker than full, as Accelerate's table and its docs
    say (5-9x there): the reason a user would pick it."""
    quicker, theirs = b["regional_compiles_quicker"], b["accelerate_regional_compiles_quicker"]
    return (
        f"{verdict(quicker > 1)} beside Accelerate's H100 table: regional compiles "
        f"{quicker:.1f}x quicker than full (theirs {theirs:.1f}x); over eager full "
        f"{b['full_speedup']:.2f}x, regional {b['regional_speedup']:.2f}x (theirs "
        f"{b['accelerate_full_speedup']:.2f}x, {b['accelerate_regional_speedup']:.2f}x)"
    )


def generate(where: str) -> Found:
    workload = Workload.create(device=where, dtype="bfloat16", kind="generate", new_tokens=32)
    m = measure(ModelRef("gemma-2b"), workload,
                Strategy.create("full", "inductor", "reduce-overhead"), TIMED)  # fmt: skip
    if not m.feasible or m.latency is None or m.ttft is None or m.eager_latency is None:
        return Found([f"FAIL gemma-2b generate reduce-overhead: {m.status} {m.reason[:300]}"])
    skips, why = graphs_lost(m)
    figures = {"decode_ms": m.latency.median_ms, "eager_decode_ms": m.eager_latency.median_ms,
               "ttft_ms": m.ttft.median_ms, "tokens_per_s": m.tokens_per_s,
               "compile_s": m.compile_s, "skips": skips,
               "pool_mb": m.timings.get("cuda_graph_pool_mb")}  # fmt: skip
    return Found([
        f"{verdict(skips == 0)} gemma-2b generate reduce-overhead: decode "
        f"{m.latency.median_ms:.2f} ms/token (eager {m.eager_latency.median_ms:.2f}), TTFT "
        f"{m.ttft.median_ms:.1f} ms, {m.tokens_per_s or 0:.0f} tokens/s, compile "
        f"{m.compile_s or 0:.1f} s, {skips} CUDA-graph skips{why}"
    ], figures)  # fmt: skip


def generate_confirmation(where: str) -> Found:
    workload = Workload.create(device=where, dtype="bfloat16", kind="generate", new_tokens=16)
    strategies = [OVERHEAD, Strategy.create("regional", "inductor", "reduce-overhead")]
    settings = Settings(iters=5, warmup=2, timeout_s=900)
    m = confirm(GEMMA, workload, strategies, settings, [])
    rounds = {k: len(v) for k, v in m.rounds.items()}
    every = all(rounds.get(s.key) == settings.iters for s in [Strategy("none"), *strategies])
    return Found([f"{verdict(m.ok and every)} generate confirmation, reduce-overhead full and "
                  f"regional in one process: {m.status}, rounds {rounds} of {settings.iters} "
                  f"each {why_failed(m)}"], {"rounds": rounds})  # fmt: skip


def generate_calls(gen: Any, prompt: Any, calls: int, new_tokens: int) -> dict[str, Any]:
    """``calls`` greedy ``generate`` calls of ``gen`` on ``prompt``: the CUDA graphs each
    recorded (Inductor's log), the fallbacks, each call's tokens (on the CPU: no output of a
    call is kept alive into the next, where cudagraph trees would record again rather than
    overwrite it), and whether every call's cache was the static one, marked so."""
    import torch

    per_call, tokens, static = [], [], True
    with (
        cudagraph_logs.cudagraph_skips() as skips,
        cudagraph_logs.cudagraph_recordings() as recordings,
    ):
        for _ in range(calls):
            before = recordings()
            with torch.no_grad():
                out = gen.generate(prompt, attention_mask=torch.ones_like(prompt),
                                   max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                   do_sample=False, return_dict_in_generate=True)  # fmt: skip
            per_call.append(recordings() - before)
            tokens.append(out.sequences[:, prompt.shape[1] :].cpu())
            static = static and all(
                getattr(layer.keys, "_dynamo_static_input_type", None) == "unguarded"
                for layer in out.past_key_values.layers
            )
            del out
        found = skips()
    return {"recorded": per_call, "tokens": tokens, "static": static, "fallbacks": found}


def eager_answer(model: Any, prompt: Any, new_tokens: int, dtype: str) -> tuple[Any, Any]:
    """Eager's greedy tokens (on the CPU) and the reader of another answer against them under
    the gate's tolerance: a first difference where eager's top two logits were within the
    gate's element-wise tolerance of each other (no reference here: its atol and rtol at the
    larger logit) is a near tie, which passes, as the trial's own token check lets it."""
    import torch

    from autotune.trial import accuracy
    from autotune.trial.scenarios import generate as generated
    from autotune.trial.scenarios import served

    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, cache_implementation="static",
                             return_dict_in_generate=True, output_logits=True)  # fmt: skip
    expected = out.sequences[:, prompt.shape[1] :].cpu()
    margins = [served.margin(x) for x in out.logits]
    atol, rtol = accuracy.TOLERANCES[dtype]
    tie = max(atol + rtol * float(x.float().abs().max()) for x in out.logits)

    def check(tokens: Any, where: str) -> Any:
        return generated.check_tokens(expected, tokens, where, margins, tie)

    return expected, check


def generation_applied(where: str) -> Found:
    """Check 6: ``autotune.apply_generation`` with ``reduce-overhead``, three ``generate`` calls
    of one prompt: see :func:`applied_verdict`."""
    import autotune

    workload = Workload.create(device=where, dtype="bfloat16", kind="generate", new_tokens=16)
    model, (prompt,) = catalog.build(GEMMA, workload)
    _, check = eager_answer(model, prompt, 16, "bfloat16")
    found = generate_calls(autotune.apply_generation(model, OVERHEAD), prompt, 3, 16)
    return applied_verdict(found, [check(t, f" in call {n}") for n, t in
                                   enumerate(found["tokens"], 1)])  # fmt: skip


def applied_verdict(found: dict[str, Any], checks: list[Any]) -> Found:
    """Check 6's verdict: every call's tokens as eager's under the gate's tolerance, the cache
    marked static, no fallback; its graphs recorded once, from both sides: one cache, so a
    decode graph at least, and at most that and the prefill's (compiled); none at the third
    call, a key the first two recorded."""
    recorded, fallbacks = found["recorded"], found["fallbacks"]
    low, high = recorded_bounds(OVERHEAD, 1, 1)
    high -= 1  # one request, played alone: no slack for a second key
    wrong = [c.detail for c in checks if not c.passed]
    ok = (not fallbacks and found["static"] and not wrong and low <= sum(recorded) <= high
          and recorded[-1] == 0)  # fmt: skip
    why = f"; fallbacks: {fallbacks[:2]}" if fallbacks else ""
    ties = [c.detail for c in checks if c.near_tie]
    figures = {"static_cache": found["static"], "recorded": recorded,
               "tokens_as_eager": [c.matched for c in checks], "near_ties": ties,
               "fallbacks": len(fallbacks)}  # fmt: skip
    return Found([f"{verdict(ok)} apply_generation reduce-overhead: {len(recorded)} generates "
                  f"recorded {recorded} CUDA graphs ({low}..{high} in all, none at the last), "
                  f"cache marked static {found['static']}, tokens as eager's "
                  f"{[c.matched for c in checks]}{why}"
                  + "".join(f"; {w}" for w in wrong + ties)], figures)  # fmt: skip


PROBE_CALLS = 4  # the probe's generate calls of each cache kind
HEALTHY = [1, 1, 0, 0]  # the decode graph at the first call, the prefill's at the second


def probe(where: str) -> Found:
    """Check 0, the lease's first step: ``autotune.apply_generation`` with ``reduce-overhead``
    and the ``single`` and ``pow2`` caches, four ``generate`` calls of one prompt each, the
    CUDA graphs each call recorded. A healthy run reads ``[1, 1, 0, 0]``: a graph recorded
    at every call is a cache made anew at each (new addresses record again)."""
    import autotune

    workload = Workload.create(device=where, dtype="bfloat16", kind="generate", new_tokens=8)
    model, (prompt,) = catalog.build(GEMMA, workload)
    lines, figures = [], {}
    for kind in ("single", "pow2"):
        strategy = dataclasses.replace(OVERHEAD, kv_cache=kind)
        found = generate_calls(autotune.apply_generation(model, strategy), prompt,
                               PROBE_CALLS, 8)  # fmt: skip
        line, figures[kind] = probe_verdict(kind, found)
        lines.append(line)
    return Found(lines, figures)


def probe_verdict(kind: str, found: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    recorded, fallbacks = found["recorded"], found["fallbacks"]
    same = all(bool((t == found["tokens"][0]).all()) for t in found["tokens"])
    ok = recorded == HEALTHY and not fallbacks and found["static"] and same
    why = f"; fallbacks: {fallbacks[:2]}" if fallbacks else ""
    return (f"{verdict(ok)} probe, apply_generation kv_cache={kind}: recordings per generate "
            f"{recorded} (healthy {HEALTHY}), cache static {found['static']}, every call's "
            f"tokens the same {same}{why}",
            {"recorded": recorded, "fallbacks": len(fallbacks), "static": found["static"],
             "same_tokens": same})  # fmt: skip


TRAFFIC = Workload(seq_len="16..512", requests=24, dtype="bfloat16")  # the check's traffic


def traffic(where: str) -> Found:

    workload = dataclasses.replace(TRAFFIC, device=where)
    lines, figures = [], {}
    for extra in ({}, {"marks": "seq"}, {"buckets": "pow2"}, {"stance": "eager_on_recompile"}):
        strategy = Strategy.create("full", "inductor", "reduce-overhead", **extra)
        m = measure(GEMMA, workload, strategy, TIMED)
        t = m.traffic or {}
        skips, why = graphs_lost(m)
        ok = (m.feasible and m.accuracy is not None and m.accuracy.passed and bool(t)
              and skips == 0)  # fmt: skip
        figures[strategy.key] = {"skips": skips, "recorded": sum(t.get("recorded", [])),
            "ready_s": t.get("ready_s"), "eager_ready_s": t.get("eager_ready_s"),
            "stalls": t.get("stalls"), "served_eager": len(t.get("ran_eager", [])),
            "speedup": m.speedup, "judged": m.accuracy.detail if m.accuracy else None,
        }  # fmt: skip
        lines.append(f"{verdict(ok)} traffic {strategy.key}: {m.status}, ready "
                     f"{t.get('ready_s', 0):.1f} s (eager {t.get('eager_ready_s', 0):.1f}), "
                     f"{t.get('stalls', 0)} stalls ({sum(t.get('recorded', []))} recordings), "
                     f"{len(t.get('ran_eager', []))} served eager, {m.speedup or 0:.2f}x, "
                     f"{skips} CUDA-graph skips{why}; "
                     f"{m.accuracy.detail if m.accuracy else ''} {m.reason[:200]}")  # fmt: skip
    bucketed = Strategy.create("full", "inductor", "reduce-overhead", buckets="pow2")
    graphs, found = applied_buckets(GEMMA, workload, bucketed)
    figures["apply_buckets"] = {"graphs": graphs, "fallbacks": len(found)}
    lines.append(
        f"{verdict(graphs == 2 and not found)} apply of buckets=pow2 reduce-overhead: keyword "
        f"calls at 17..33 compiled {graphs} graphs (2 buckets); fallbacks {found[:2]}"
    )
    return Found(lines, figures)


def auto_buckets(where: str) -> Found:
    """Check 15: a traffic with ``--buckets auto`` and ``reduce-overhead``: its pilot (pow2,
    cold) prices the edges, the trial measures them: feasible, right answers, no CUDA-graph
    fallback, none recorded again in the rounds, and the traffic's ``auto`` block (the edges,
    the predicted and the measured cost)."""
    workload = dataclasses.replace(TRAFFIC, device=where)
    strategy = Strategy.create("full", "inductor", "reduce-overhead", buckets="auto")
    m = measure(GEMMA, workload, strategy, TIMED)
    t = m.traffic or {}
    auto, (skips, why) = t.get("auto") or {}, graphs_lost(m)
    _, again = recordings_of(m)
    ok = (m.feasible and m.accuracy is not None and m.accuracy.passed and skips == 0
          and again == 0 and bool(auto.get("edges")) and "measured" in auto)  # fmt: skip
    figures = {"edges": auto.get("edges"), "predicted": auto.get("predicted"),
               "measured": auto.get("measured"), "note": auto.get("note"), "skips": skips,
               "recorded_again": again, "speedup": m.speedup,
               "stalls": t.get("stalls")}  # fmt: skip
    return Found([f"{verdict(ok)} traffic with buckets=auto reduce-overhead: {m.status}, edges "
                  f"{auto.get('edges')}, predicted {auto.get('predicted')}, measured "
                  f"{auto.get('measured')}, {m.speedup or 0:.2f}x, {skips} CUDA-graph "
                  f"skips{why}, {again} recorded again in the rounds; "
                  f"{m.accuracy.detail if m.accuracy else ''} {why_failed(m)}"],
                 figures)  # fmt: skip


def applied_buckets(
    ref: ModelRef, workload: Workload, bucketed: Strategy
) -> tuple[int, list[tuple[str, str]]]:
    """Check 10's ``autotune.apply`` of a bucketed strategy, in this process: keyword calls at
    17, 20, 31, 32 and 33 tokens (buckets 32 and 64); the graphs they compiled, and the
    CUDA-graph fallbacks. The graphs are a difference of Dynamo's count: ``reset()`` clears
    no counter, so the checks before it in the same process would add theirs."""
    import torch

    import autotune

    model, _ = catalog.build(ref, workload)
    served = autotune.apply(model, bucketed)
    torch._dynamo.reset()
    before = metrics.compile_counts()[0]
    vocab = min(1000, model.config.vocab_size)
    with cudagraph_logs.cudagraph_skips() as skips, torch.no_grad():
        for n in (17, 20, 31, 32, 33):  # buckets 32, 32, 32, 32, 64
            ids = torch.randint(0, vocab, (1, n), device=workload.device)
            out = served(input_ids=ids, attention_mask=torch.ones_like(ids))
            assert out.logits.shape[1] == n
        found = skips()
    return metrics.compile_counts()[0] - before, found


def precompiled_cuda_graphs(where: str) -> Found:
    settings = Settings(iters=5, warmup=2, timeout_s=900, starts=("cold", "precompiled"))
    strategy = Strategy.create("full", "inductor", "reduce-overhead", fullgraph=True)
    m = measure(ModelRef("toy-64"), Workload.create(device=where), strategy, settings)
    start = m.starts.get("precompiled")
    ok = (m.feasible and start is not None and start.status == "not-applicable"
          and "without CUDA graphs" in start.note)  # fmt: skip
    what = f"{start.status}: {start.note}" if start else f"no start ({m.status} {m.reason[:200]})"
    return Found([f"{verdict(ok)} precompiled start of {strategy.key}: {what}"],
                 {"start": start.status if start else None})  # fmt: skip


def _env(**extra: str) -> dict[str, str]:
    """A child's environment: this one, on the default local storage in its working directory
    (``studies/autotune.db``, where checks 8 and 9 read it: a ``$AUTOTUNE_STUDIES`` passed
    through made check 9 count 0 workers), plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTOTUNE_STORAGE", "AUTOTUNE_STUDIES")}  # fmt: skip
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, **extra}  # this checkout first, then what was there


def _cli(*argv: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *argv], cwd=cwd,
                          capture_output=True, text=True, env=_env(), timeout=1800)  # fmt: skip


def load_portable(folder: str, where: str) -> dict[str, Any]:
    """Check 8's fresh process: apply ``folder``'s ``best.json`` to its model on ``where`` and
    call it once; what the FX graph cache did. The float32 matmul precision is set as
    docs/preflight.md tells the users of a float32 study on a GPU (its trials ran at TF32), and
    autotune's warnings (an artefact refused or missed) are errors."""
    import warnings

    import torch

    import autotune
    from autotune.starts import later

    torch.set_float32_matmul_precision("high")
    path = Path(folder) / "best.json"
    block = json.loads(path.read_text()).get("autotune") or {}
    workload = Workload.from_dict({**block["workload"], "device": where})
    model, inputs = catalog.build(ModelRef.from_dict(block["model"]), workload)
    with warnings.catch_warnings(record=True) as others:
        warnings.simplefilter("always")
        warnings.simplefilter("error", autotune.AutotuneWarning)
        compiled = autotune.apply(model, str(path), trust_artifact=True)
        with torch.no_grad():
            compiled(*inputs)
    return {**later.cache_counters(), "other_warnings": [str(w.message)[:200] for w in others]}


def portable_verdict(folder: Path, where: str) -> Found:
    """Check 8's verdict on an export in ``folder``: it ships a cache artefact, and a fresh
    process with an empty Inductor cache loads it on ``where`` and hits, with no miss."""
    block = json.loads((folder / "best.json").read_text()).get("autotune") or {}
    shipped = block.get("cache_artifact")
    size = shipped.get("bytes") if isinstance(shipped, dict) else None
    figures: dict[str, Any] = {"pick": block.get("key"), "artifact_bytes": size}
    if not isinstance(shipped, dict):
        return Found([f"FAIL the pick {block.get('key')} ships no cache artefact: nothing to "
                      "load, so nothing was checked"], figures)  # fmt: skip
    empty = folder / "empty-inductor-cache"  # a hit can come from the artefact alone
    done = subprocess.run(load_command(folder, where), capture_output=True, text=True,
                          env=_env(TORCHINDUCTOR_CACHE_DIR=str(empty)), timeout=900)  # fmt: skip
    lines = done.stdout.strip().splitlines()
    loaded = json.loads(lines[-1]) if done.returncode == 0 and lines else {}
    figures.update(loaded)
    hits, misses = loaded.get("fxgraph_cache_hit", 0), loaded.get("fxgraph_cache_miss", 0)
    ok = done.returncode == 0 and hits > 0 and misses == 0
    why = "" if done.returncode == 0 else f": {done.stderr.strip()[-400:]}"
    line = (f"{verdict(ok)} the artefact of {block.get('key')} loads on {where} in a fresh "
            f"process: {hits} FX graph cache hits, {misses} misses{why}")  # fmt: skip
    return Found([line], figures)


def portable_elsewhere(where: str) -> Found:
    with tempfile.TemporaryDirectory() as folder:
        out = _cli(*PORTABLE, cwd=folder)
        if out.returncode != 0:
            return Found([f"FAIL search on cuda:1: {out.stderr[-500:]}"])
        return portable_verdict(Path(folder), where)


def two_workers(where: str) -> Found:
    from autotune.storage import Store

    with tempfile.TemporaryDirectory() as folder:
        out = _cli(*WORKERS, cwd=folder)
        if out.returncode != 0:
            return Found([f"FAIL search --workers 2: exit {out.returncode}: {out.stderr[-300:]}"])
        try:
            result = json.loads(out.stdout)
        except json.JSONDecodeError as exc:
            return Found([f"FAIL search --workers 2 --json printed more than its JSON ({exc}): "
                          f"{out.stdout[:300]!r}"])  # fmt: skip
        store = Store(f"sqlite:///{folder}/studies/autotune.db")
        workers = {c.worker for c in store.claims("two") if c.key != "none"}
        store.engine.dispose()
        ok = result["measured"] >= 2 and len(workers) == 2
        figures = {"measured": result["measured"], "workers": len(workers),
                   "chosen": result["chosen"]}  # fmt: skip
        return Found([f"{verdict(ok)} search --workers 2: {result['measured']} measured by "
                      f"{len(workers)} workers, chosen {result['chosen']}"], figures)  # fmt: skip


def served_and_gated(where: str) -> Found:
    """Check 12: ``SERVED`` confirms a compiled pick and its self-check serves the traffic
    through the export in a plain loop on the GPU, with the same compiles (CUDA graphs'
    recordings are no compiles) and eager's outputs; then ``autotune check --measure`` of the
    export measures it again on the GPU and passes."""
    with tempfile.TemporaryDirectory() as folder:
        out = _cli(*SERVED, cwd=folder)
        said = [line for line in out.stdout.splitlines() if "served as measured" in line]
        chosen = next((line.split(": ", 1)[1] for line in out.stdout.splitlines()
                       if line.startswith("chosen (")), "?")  # fmt: skip
        if out.returncode != 0:
            return Found([f"FAIL search: exit {out.returncode}: {out.stderr[-500:]}"])
        ok = chosen != "none" and bool(said) and not any(x.startswith("not ") for x in said)
        lines = [f"{verdict(ok)} search of a traffic with reduce-overhead: chosen {chosen}; "
                 + ("; ".join(said) or "no self-check line: " + out.stdout[-600:])]  # fmt: skip
        gate = _cli(*GATE, cwd=folder)
        try:
            report = json.loads(gate.stdout)
        except json.JSONDecodeError:
            report = {}
        figures = {"chosen": chosen, "served": said, "gate_exit": gate.returncode,
                   "gate": report}  # fmt: skip
        lines.append(f"{verdict(gate.returncode == 0)} autotune check best.json --measure on the "
                     f"GPU: exit {gate.returncode}; "
                     f"{json.dumps(report)[:900] if report else gate.stderr[-500:]}")  # fmt: skip
        return Found(lines, figures)


GENERATIONS = Workload(
    kind="generate", seq_len="16..128", new_tokens="8..32", requests=8, dtype="bfloat16"
)  # check 13's traffic of prompts and answers


def generations(where: str) -> Found:
    """Check 13: the generate workload over a traffic with ``reduce-overhead`` on gemma-2b (one
    layer), with one static cache and with a cache a pow2 bucket (the prefill eager): see
    :func:`generations_verdict`."""
    return generate_traffic(where, (OVERHEAD, dataclasses.replace(OVERHEAD, prefill="eager",
                                                                  kv_cache="pow2")))  # fmt: skip


def padded_prefill(where: str) -> Found:
    """Check 14: the same traffic with the prefill padded to pow2 buckets and a cache a bucket:
    one prefill graph a bucket, recorded once each (:func:`generations_verdict`)."""
    return generate_traffic(where, (dataclasses.replace(OVERHEAD, buckets="pow2",
                                                        kv_cache="pow2"),))  # fmt: skip


def generate_traffic(where: str, strategies: tuple[Strategy, ...]) -> Found:
    workload = dataclasses.replace(GENERATIONS, device=where)
    lines, figures = [], {}
    for strategy in strategies:
        m = measure(ModelRef("gemma-2b", layers=1), workload, strategy, TIMED)
        line, figures[strategy.key] = generations_verdict(m, strategy)
        lines.append(line)
    return Found(lines, figures)


TTFT_WITHIN = 1.2  # check 13: a strategy's weighted TTFT at most a fifth over eager's


def recorded_bounds(strategy: Strategy, caches: int, played: int,
                    moved: int = 0) -> tuple[int, int]:  # fmt: skip
    """The CUDA graphs a generate traffic's first pass records, from both sides: a decode graph a
    cache length at least; at most that, one more, where the prefill is compiled one prefill
    graph a distinct request (batch, prompt and cache) its first pass played, and one a later
    arrival played again where a later dynamic graph took its key over (``moved``)."""
    low = caches
    return low, low + 1 + (played if strategy.prefill == "compiled" else 0) + moved


def generations_verdict(m: Any, strategy: Strategy) -> tuple[str, dict[str, Any]]:
    """Checks 13 and 14's verdict on one trial: feasible, every request's tokens as eager's
    under the gate's tolerance (a near tie of eager's top two logits passes, as the trial's own
    check does), no CUDA-graph fallback; the graphs its first pass recorded within
    :func:`recorded_bounds`, and none recorded again in the rounds, which replay the keys the
    first pass played; the weighted time per token under eager's, and TTFT within
    :data:`TTFT_WITHIN` of eager's."""
    t, (skips, why) = m.traffic or {}, graphs_lost(m)
    recorded, caches = sum(t.get("recorded", [])), t.get("cache_lens") or [0]
    low, high = recorded_bounds(strategy, len(caches), len(t.get("played", [])),
                                len(t.get("moved", [])))  # fmt: skip
    _, again = recordings_of(m)
    w = t.get("weighted", {})
    tpot, eager_tpot = w.get("tpot_ms", 0.0), w.get("eager_tpot_ms", 0.0)
    ttft, eager_ttft = w.get("ttft_ms", 0.0), w.get("eager_ttft_ms", 0.0)
    tokens = m.tokens.passed if m.tokens is not None else False
    failed = [why for why, bad in (
        (f"{m.status} {m.reason[:200]}", not m.feasible),
        (f"tokens: {m.tokens.detail if m.tokens else 'not checked'}", not tokens),
        (f"answers: {m.accuracy.detail if m.accuracy else 'not judged'}",
         m.accuracy is None or not m.accuracy.passed),
        (f"{skips} CUDA-graph fallbacks{why}", skips > 0),
        (f"{recorded} recorded, outside {low}..{high}", not low <= recorded <= high),
        (f"{again} recorded again in the rounds", again > 0),
        (f"per token {tpot:.2f} ms, not under eager's {eager_tpot:.2f}",
         not 0 < tpot < eager_tpot),
        (f"TTFT {ttft:.1f} ms over {TTFT_WITHIN} x eager's {eager_ttft:.1f}",
         not 0 < ttft <= TTFT_WITHIN * eager_ttft),
    ) if bad]  # fmt: skip
    figures = {
        "ready_s": t.get("ready_s"), "eager_ready_s": t.get("eager_ready_s"),
        "stalls": t.get("stalls"), "recorded": recorded, "recorded_bounds": [low, high],
        "recorded_again": again, "compiles": t.get("compiles"), "cache_lens": caches,
        "weighted": w, "skips": skips, "tokens": dataclasses.asdict(m.tokens) if m.tokens
        else None}  # fmt: skip
    line = (f"{verdict(not failed)} generate over a traffic, {strategy.key}: {m.status}, ready "
            f"{t.get('ready_s', 0):.1f} s (eager {t.get('eager_ready_s', 0):.1f}), "
            f"{t.get('stalls', 0)} stalls ({recorded} CUDA graphs recorded, {low}..{high} "
            f"expected; {again} in the rounds), caches {caches}; per token {tpot:.2f} ms (eager "
            f"{eager_tpot:.2f}), TTFT {ttft:.1f} ms (eager {eager_ttft:.1f})"
            + (f"; {'; '.join(failed)}" if failed else ""))  # fmt: skip
    return line, figures


def peaks_command(where: str) -> list[str]:
    """Check 11's fresh process, which reads eager's peaks before and beside CUDA graphs."""
    return [sys.executable, str(Path(__file__).resolve()), "--peaks-beside-graphs", "--device",
            where]  # fmt: skip


def peaks_beside_graphs(where: str) -> dict[str, float]:
    """Check 11's fresh process: eager's peak before CUDA graphs exist, then beside their live
    pools, with and without them. A fresh process, because what earlier checks left on the GPU
    (their models, their graphs' pools, freed only when collected) would move these readings:
    run after checks 1 to 7 in one process, "before" read 1426 MiB on an H200, 1336 alone."""
    import torch

    import autotune

    workload = dataclasses.replace(POOLED_WORKLOAD, device=where)
    model, inputs = catalog.build(POOLED, workload)
    memory = device.PeakMemory(where)

    def eager() -> None:
        with torch.no_grad():
            model(*inputs)

    eager()
    memory.reset()
    eager()
    before = memory.peak_mb()
    compiled = autotune.apply(model, OVERHEAD)
    with torch.no_grad():
        for _ in range(3):  # the compile, the recording, a replay
            compiled(*inputs)
    memory.reset()
    eager()
    beside, without = memory.peak_mb(), memory.peak_mb(pools=False)
    return {"before_graphs_mb": before, "beside_graphs_mb": beside, "without_pools_mb": without,
            "pools_mb": beside - without}  # fmt: skip


def eager_beside_graphs(where: str) -> Found:
    done = subprocess.run(peaks_command(where), capture_output=True, text=True, env=_env(),
                          timeout=900)  # fmt: skip
    out = done.stdout.strip().splitlines()
    if done.returncode != 0 or not out:
        return Found([f"FAIL the fresh process ended {done.returncode}: "
                      f"{done.stderr.strip()[-400:]}"], {})  # fmt: skip
    here = json.loads(out[-1])
    before, beside = here["before_graphs_mb"], here["beside_graphs_mb"]
    without = here["without_pools_mb"]
    margin = same_mb(before, without)
    seen = beside - before > 2 * margin  # the pool shows: the old reading would fail this check
    ok = seen and abs(without - before) <= margin
    lines = [f"{verdict(ok)} in a fresh process, eager's peak {before:.0f} MiB before CUDA "
             f"graphs, {without:.0f} MiB beside them without their pools "
             f"({beside - without:.0f} MiB; {beside:.0f} MiB with them)"]  # fmt: skip
    trials = {"overhead": OVERHEAD, "plain": Strategy.create("full", "inductor")}
    workload = dataclasses.replace(POOLED_WORKLOAD, device=where)
    found = {name: measure(POOLED, workload, s, COLD) for name, s in trials.items()}
    peaks = {name: memory_of(m) for name, m in found.items()}
    graphs, plain = peaks["overhead"], peaks["plain"]
    ran = all(m.ok and m.memory for m in found.values())
    eager_same = ran and abs(graphs["eager_peak_mb"] - plain["eager_peak_mb"]) <= same_mb(
        graphs["eager_peak_mb"], plain["eager_peak_mb"]
    )
    counted = ran and graphs["compiled_peak_mb"] > graphs["eager_peak_mb"]
    lines.append(f"{verdict(eager_same and counted)} trials: reduce-overhead eager "
                 f"{graphs['eager_peak_mb'] or 0:.0f} MiB, compiled "
                 f"{graphs['compiled_peak_mb'] or 0:.0f} MiB; plain Inductor eager "
                 f"{plain['eager_peak_mb'] or 0:.0f} MiB, compiled "
                 f"{plain['compiled_peak_mb'] or 0:.0f} MiB "
                 f"{' '.join(why_failed(m) for m in found.values())}")  # fmt: skip
    return Found(lines, {"in_process": here, "trials": peaks})


CONTINUOUS = Workload(kind="continuous", rate=8.0, seq_len="16..128", new_tokens="8..32",
                      requests=12, dtype="bfloat16")  # fmt: skip  # check 16's traffic
GRAPHED = Strategy.create("full", "inductor", batching="graphs=both+q=64+kv=1024")


def continuous(where: str) -> Found:
    """Check 16: continuous batching with transformers' CUDA graphs (see the module's text)."""
    import importlib.util

    flash = importlib.util.find_spec("flash_attn") is not None
    said = ("flash_attn installed: transformers' decode fast path can record" if flash else
            "no flash_attn here (its wheel is built from source): the model keeps sdpa, so "
            "only the varlen path can record")  # fmt: skip
    m = measure(ModelRef("gemma-2b", layers=1), dataclasses.replace(CONTINUOUS, device=where),
                GRAPHED, TIMED)  # fmt: skip
    if not m.ok:
        return Found([f"FAIL continuous batching: {why_failed(m)}", said])
    c = m.traffic["continuous"]
    steady = c["steady"]
    ok = bool(m.accuracy and m.accuracy.passed)
    stalls = c["stalls_s"]
    figures = {"ready_s": c["ready_s"], "stalls": len(stalls), "stall_s": sum(stalls),
               "graphs": c["graphs"], "flash_attn": flash, "speedup": m.speedup,
               **{f"{side}_{k}": steady[side][k] for side in ("eager", "compiled")
                  for k in ("ttft_p50_ms", "tpot_p50_ms", "tokens_per_s")}}  # fmt: skip
    f = {k: f"{v:.3g}" for k, v in figures.items() if isinstance(v, float)}
    line = (f"{verdict(ok)} continuous batching {GRAPHED.key}: ready after {f['ready_s']} s, "
            f"{len(stalls)} compiles after it ({f['stall_s']} s), TTFT p50 "
            f"{f['compiled_ttft_p50_ms']} ms (eager {f['eager_ttft_p50_ms']}), "
            f"{f['compiled_tpot_p50_ms']} ms a token (eager {f['eager_tpot_p50_ms']}), tokens "
            f"as eager's {ok}")  # fmt: skip
    return Found([line, said], figures)


def plan() -> list[tuple[int, Check]]:
    """Every check, by its number: the probe (0), then checks 1 to 16."""
    one = Workload(device="cpu")
    bf16 = Workload(device="cpu", dtype="bfloat16")
    gen = Workload(device="cpu", dtype="bfloat16", kind="generate", new_tokens=4)
    short = ModelRef("gemma-2b", layers=1)
    toy = ModelRef("toy-64", layers=1)
    generations_cpu = dataclasses.replace(GENERATIONS, device="cpu")
    return list(enumerate([
        Check("probe: recordings per generate", [(short, gen)], probe),
        Check("CUDA events vs perf_counter", [], events_agree),
        Check("reduce-overhead on toy-64", [(toy, one)], cuda_graphs),
        Check("llama-3.2-1b beside Accelerate", [(ModelRef("llama-3.2-1b", layers=1), bf16)],
              llama_table),
        Check("generate on gemma-2b", [(short, gen)], generate),
        Check("generate confirmation", [(short, gen)], generate_confirmation),
        Check("apply_generation", [(short, gen)], generation_applied),
        Check("precompiled CUDA graphs", [(toy, one)], precompiled_cuda_graphs),
        Check("portable start on another index", [(toy, one)], portable_elsewhere, gpus=2,
              commands=[PORTABLE, load_command("FOLDER", "cuda:0")]),
        Check("search --workers 2", [(toy, one)], two_workers, gpus=2, commands=[WORKERS]),
        Check("a traffic with reduce-overhead", [(short, TRAFFIC)], traffic),
        Check("eager's peak beside CUDA graphs",
              [(POOLED, dataclasses.replace(POOLED_WORKLOAD, device="cpu"))],
              eager_beside_graphs, commands=[peaks_command("cuda:0")]),
        Check("served as measured, and the CI gate", [(short, TRAFFIC)], served_and_gated,
              commands=[SERVED, GATE]),
        Check("generate over a traffic", [(short, generations_cpu)], generations),
        Check("padded prefill, a cache a bucket", [(short, generations_cpu)], padded_prefill),
        Check("a traffic with buckets=auto", [(short, TRAFFIC)], auto_buckets),
        Check("continuous batching, CUDA graphs",
              [(short, dataclasses.replace(CONTINUOUS, device="cpu"))], continuous),
    ]))  # fmt: skip


# Each check's seconds on one H100 as measured on 2026-11-27 (torch 2.11, the machine's start not
# counted; 8 and 9, which need two GPUs, have never run: guesses; so are 0, 13, 14 and 15, never
# run). A lent machine runs one command for at most 10 minutes and is held 15 minutes a lease,
# its start included (about 3): a lease is two calls of at most CALL_S each. A call packs checks
# up to PART_S expected seconds, 7 minutes, two within a 9-minute call for imports and a slower
# machine; a lease's two calls together up to LEASE_WORK_S.
EXPECTED_S = {
    0: 45,  # a guess: two apply_generation compiles of gemma-2b (4 layers), 8 short generates
    1: 1,
    2: 57,
    3: 62,
    4: 60,
    5: 41,
    6: 32,
    7: 12,
    8: 120,
    9: 180,
    10: 164,
    11: 73,
    12: 185,
    13: 300,  # a guess, never run
    14: 150,  # a guess: check 13's traffic, one strategy
    15: 120,  # a guess: a pilot and a trial of check 10's traffic
    16: 150,  # a guess: one continuous trial, a one-layer gemma-2b's Inductor compile
}
CALL_S = 9 * 60  # one call of a lent machine, at most (its own limit is 10 minutes)
PART_S = 420  # what one call packs, by the expected seconds above
LEASE_S, START_S = 15 * 60, 180  # a lease, and the machine's start within it
LEASE_WORK_S = LEASE_S - START_S - 60  # a lease's two calls together: a minute for both starts
# What changed since the last lent GPU goes first: the probe, then checks 13 and 6 (their
# recordings bounded from both sides), the padded prefill with a cache a bucket, --buckets auto,
# continuous batching
CHANGED = (0, 13, 6, 14, 15, 16)


def ordered(checks: list[tuple[int, Check]]) -> list[tuple[int, Check]]:
    """``checks`` in the lease's order: :data:`CHANGED` first, then the rest by number."""
    first = [c for n in CHANGED for c in checks if c[0] == n]
    return first + [c for c in checks if c[0] not in CHANGED]


def parts(checks: list[tuple[int, Check]], gpus: int) -> list[list[tuple[int, Check]]]:
    """The checks that run on ``gpus`` GPUs, in :func:`ordered`'s order, packed into calls of at
    most :data:`PART_S` expected seconds, two a lease: a lease's second call takes what its
    first left of :data:`LEASE_WORK_S` (a check that needs more GPUs is skipped at no cost)."""
    out: list[list[tuple[int, Check]]] = [[]]
    used, before = 0.0, 0.0  # this call's seconds, and its lease's first call's
    for number, check in ordered(checks):
        seconds = EXPECTED_S[number] if check.gpus <= gpus else 0
        room = min(PART_S, LEASE_WORK_S - before) if len(out) % 2 == 0 else PART_S
        if out[-1] and used + seconds > room:
            before = used if len(out) % 2 == 1 else 0.0
            out.append([])
            used = 0.0
        out[-1].append((number, check))
        used += seconds
    return out


def lease_plan(checks: list[tuple[int, Check]], gpus: int) -> list[str]:
    """The plan in words, as ``--dry-run`` prints it: each lease's two calls, each one's
    checks, expected minutes and command line."""
    lines = []
    for k, part in enumerate(parts(checks, gpus), 1):
        lease, call = (k + 1) // 2, 2 - k % 2
        lines.append(f"lease {lease}, call {call} on {gpus} GPU{'s' if gpus > 1 else ''}: checks "
                     f"{','.join(str(n) for n, _ in part)}, about "
                     f"{expected_s(part, gpus) / 60:.1f} min: timeout {CALL_S} python "
                     f"bench/gpu.py --part {k} --out part{k}.json")  # fmt: skip
    return lines


def expected_s(part: list[tuple[int, Check]], gpus: int) -> float:
    return sum(EXPECTED_S[n] for n, c in part if c.gpus <= gpus)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="check the plan on any machine")
    p.add_argument("--out", default="gpu-acceptance.json", help="where the JSON report goes")
    p.add_argument("--only", default="", help="run these checks alone, by number: 0,2,10")
    p.add_argument("--part", type=int, default=0, help="run one part of the checks (1, 2, ...):"
                   " one call of a lent machine, two a lease; --dry-run lists them")  # fmt: skip
    p.add_argument("--table", nargs="+", metavar="REPORT", help="print the Markdown table of "
                   "these reports (one or more --out files) and exit")  # fmt: skip
    # check 8's fresh process (load_command)
    p.add_argument("--load-portable", metavar="FOLDER", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cuda:0", help=argparse.SUPPRESS)
    # check 11's fresh process (peaks_command)
    p.add_argument("--peaks-beside-graphs", action="store_true", help=argparse.SUPPRESS)
    return p


def parse_command(argv: list[str]) -> None:
    """Parse one command line of the plan as the program it names would (autotune's, or this
    script's); an ``autotune search`` also builds its study spec from the line on this
    machine's CPU, so a bad value in the space fails here too."""
    if argv and argv[0] == sys.executable:
        parser().parse_args(argv[2:])
        return
    from autotune.cli import build_parser
    from autotune.search.spec import StudySpec

    args = build_parser().parse_args(argv)
    if args.command == "search":
        flags = {k: v for k, v in vars(args).items() if k not in ("space", "debug", "command")}
        spec = StudySpec.from_sources(args.space, **{**flags, "device": "cpu"})
        spec.space.validate(args.device or "cpu")  # a CUDA-graph space is checked as on CUDA
        catalog.check(spec.model, spec.workload)


def dry_run(checks: list[tuple[int, Check]]) -> int:
    """What can be checked without a GPU: the plan's strategies and workloads parse, its models
    build at one layer, every command line it runs parses."""
    users: dict[tuple[ModelRef, Workload], list[str]] = {}
    for _, check in checks:
        for pair in check.models:
            users.setdefault(pair, []).append(check.name)
    for (ref, workload), names in users.items():  # each model once, however many checks use it
        catalog.check(ref, workload)
        model, inputs = catalog.build(ref, workload)
        print(f"built {ref.name} ({workload.kind}, {workload.dtype}) for: {', '.join(names)}")
        del model, inputs
    for s in ("full", "regional"):
        Strategy.create(s, "inductor", "reduce-overhead").validate()
    refused = Strategy.create("full", "inductor", "reduce-overhead", fullgraph=True)
    if "without CUDA graphs" not in precompiled.not_applicable(
        "precompiled", refused, "inference", 0
    ):
        print("dry run: a precompiled CUDA-graph start would not be refused")
        return 1
    for number, check in checks:
        for argv in check.commands:
            parse_command(argv)
            shown = argv[1:] if argv[0] == sys.executable else ["autotune", *argv]
            print(f"parsed check {number}'s command: {' '.join(shown)}")
    print("dry run: the plan is sound")
    return 0


def machine() -> dict[str, Any]:
    """What the report's numbers were measured on."""
    import platform

    import transformers

    from autotune.environment import fingerprint

    found = fingerprint("cuda:0" if device.count() else "cpu")
    keep = ("device_name", "capability", "driver", "triton", "torch", "cuda", "cpu", "cpu_count")
    when = datetime.date.today().isoformat()
    return {**{k: found.get(k) for k in keep}, "transformers": transformers.__version__,
            "gpus": device.count(), "python": platform.python_version(), "date": when}  # fmt: skip


def versions_line(found: dict[str, Any]) -> str:
    """The versions the report's figures were measured with, in one line, first: a lent machine
    once had transformers 5.17, below what the generate paths need
    (:data:`autotune.environment.GENERATE_TRANSFORMERS`)."""
    return (f"torch {found.get('torch')}, transformers {found.get('transformers')}, CUDA "
            f"{found.get('cuda')}, driver {found.get('driver')}, {found.get('gpus')} x "
            f"{found.get('device_name')}")  # fmt: skip


def table(reports: list[dict[str, Any]]) -> str:
    """The Markdown table of one or more reports' checks, by number (a later report's check
    replaces an earlier one's)."""
    rows: dict[int, dict[str, Any]] = {}
    for report in reports:
        for check in report["checks"]:
            rows[check["number"]] = check
    out = ["| check | result |", "| --- | --- |"]
    for number in sorted(rows):
        c = rows[number]
        if c.get("skipped"):
            result = f"not run: {c['skipped']}"
        else:
            said = [line.removeprefix("PASS ").removeprefix("FAIL ") for line in c["lines"]
                    if line.startswith(("PASS", "FAIL"))]  # fmt: skip
            result = f"{'PASS' if c['passed'] else 'FAIL'}: {'; '.join(said)}"
        out.append(f"| {number}. {c['name']} | {result.replace('|', '/')} |")
    return "\n".join(out)


def main() -> int:
    p = parser()
    args = p.parse_args()
    if args.load_portable:
        print(json.dumps(load_portable(args.load_portable, args.device)))
        return 0
    if args.peaks_beside_graphs:
        print(json.dumps(peaks_beside_graphs(args.device)))
        return 0
    if args.table:
        print(table([json.loads(Path(f).read_text()) for f in args.table]))
        return 0
    checks = plan()
    last = checks[-1][0]
    if args.only:
        try:
            chosen = {int(n) for n in args.only.split(",")}
        except ValueError:
            p.error(f"--only takes check numbers 0..{last} separated by commas")
        if not all(0 <= n <= last for n in chosen):
            p.error(f"--only takes check numbers 0..{last}")
        checks = [(n, c) for n, c in checks if n in chosen]
    if args.dry_run:
        for gpus in (1, 2):
            print("\n".join(lease_plan(checks, gpus)))
        return dry_run(checks)
    gpus = device.count()
    if not gpus:
        print("no CUDA device: run with --dry-run, or on a GPU machine")
        return 1
    if args.part:
        split = parts(checks, gpus)
        if not 1 <= args.part <= len(split):
            p.error(f"--part takes 1..{len(split)} on {gpus} GPUs")
        checks = split[args.part - 1]
        print(f"part {args.part} of {len(split)}: checks {','.join(str(n) for n, _ in checks)},"
              f" about {expected_s(checks, gpus) / 60:.1f} min")  # fmt: skip
    checks = ordered(checks)  # what changed since the last lent GPU first
    report: dict[str, Any] = {"machine": machine(), "checks": [], "failed": 0}
    print(versions_line(report["machine"]), flush=True)
    for number, check in checks:
        entry: dict[str, Any] = {"number": number, "name": check.name}
        if check.gpus > gpus:
            entry.update(passed=None, skipped=f"needs {check.gpus} GPUs, {gpus} visible")
            print(f"SKIP {check.name}: {entry['skipped']}")
        else:
            start = time.perf_counter()
            try:
                found = check.run("cuda:0")
            except Exception as exc:  # one check's crash is that check's FAIL, not the run's end
                found = Found([f"FAIL {check.name}: {type(exc).__name__}: {str(exc)[:500]}"])
            seconds = time.perf_counter() - start
            entry.update(passed=found.passed, seconds=round(seconds, 1), lines=found.lines,
                         figures=found.figures)  # fmt: skip
            report["failed"] += sum(line.startswith("FAIL") for line in found.lines)
            print(f"== {number}. {check.name} ({seconds:.0f} s)")
            print("\n".join(found.lines), flush=True)
        report["checks"].append(entry)
        Path(args.out).write_text(json.dumps(report, indent=2, default=str))  # after each check
    print(table([report]))
    print(f"{report['failed']} failed; report in {args.out}")
    return int(report["failed"])


if __name__ == "__main__":
    sys.exit(main())
