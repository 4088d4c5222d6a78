"""The GPU acceptance run: one command that says, within about 25 minutes on the first GPU
autotune meets, whether its CUDA paths are right, and prints the tables BENCHMARKS.md needs.

    python bench/gpu.py                 # on a machine with a CUDA GPU
    python bench/gpu.py --dry-run       # anywhere: every command parses, every model builds
    python bench/gpu.py --only 1,2,10   # some checks alone (a lent machine's 10-minute calls)

Checks, in order (each prints PASS or FAIL with its numbers; the exit status is the count of
FAILs):

1. CUDA events against perf_counter after a synchronize: within 5 % (a 4096^2 matmul).
2. ``reduce-overhead`` on toy-64, full and regional: no CUDA-graph skip, no overwritten output,
   right answers, the recording counted in the compile.
3. llama-3.2-1b at batch 1 x 128: eager, full and regional Inductor, cold compile and latency,
   beside Accelerate's published table (full 10.7 s / 6.3 ms, regional 1.95 s / 9.7 ms, eager
   18.3 ms on an H100).
4. The generate workload on gemma-2b with ``reduce-overhead``: decode per token and TTFT.
5. The generate confirmation (several strategies in one process) with ``reduce-overhead``: its
   rounds run, nothing overwritten.
6. ``autotune.apply_generation`` with ``reduce-overhead``: two ``generate`` calls, the static KV
   cache allocated before the compiled prefill, no CUDA-graph fallback, eager's first token.
7. A precompiled start of a CUDA-graph strategy: refused, with why (torch would load it
   without CUDA graphs).
8. A portable start from ``best.cache.bin`` made on another device index (two GPUs or more).
9. ``search --workers 2`` on two GPUs (two GPUs or more).
10. A traffic (``--seq-len 16..512``) with ``reduce-overhead``: plain, marks=seq, buckets=pow2
    and stance=eager_on_recompile, each with its time to ready, stalls (a CUDA graph's
    recording included), requests served eager and the compiled graphs judged; then
    ``autotune.apply`` of the bucketed strategy serves keyword calls compiling each bucket once,
    with no CUDA-graph fallback.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune import catalog, device  # noqa: E402
from autotune.catalog import ModelRef  # noqa: E402
from autotune.starts import precompiled as ahead  # noqa: E402
from autotune.strategy.strategy import Strategy  # noqa: E402
from autotune.trial.parent import confirm, measure  # noqa: E402
from autotune.workload import Settings, Workload  # noqa: E402

ACCELERATE = {"none": (0.0, 18.3), "full": (10.7, 6.3), "regional": (1.95, 9.7)}  # s, ms (H100)
QUICK = Settings(iters=10, warmup=3, timeout_s=900)
OVERHEAD = Strategy.create("full", "inductor", "reduce-overhead")
GEMMA = ModelRef("gemma-2b", layers=4)  # the side paths' model: short, as they need no table


@dataclass
class Check:
    """One check of the run: what it builds (for the dry run) and what it measures."""

    name: str
    models: list[tuple[ModelRef, Workload]]
    run: Callable[[str], list[str]]  # device -> lines; a line starting "FAIL" fails it
    gpus: int = 1


def events_agree(where: str) -> list[str]:
    import torch

    x = torch.randn(4096, 4096, device=where)
    events = sorted(device.timed(lambda: x @ x, where) for _ in range(30))
    walls = sorted(device.wall(lambda: x @ x, where)[0] for _ in range(30))
    ratio = events[15] / walls[15]
    verdict = "PASS" if abs(ratio - 1) <= 0.05 else "FAIL"
    return [f"{verdict} events {events[15] * 1e3:.3f} ms vs perf_counter {walls[15] * 1e3:.3f} "
            f"ms (ratio {ratio:.3f})"]  # fmt: skip


def cuda_graphs(where: str) -> list[str]:
    lines = []
    for granularity in ("full", "regional"):
        strategy = Strategy.create(granularity, "inductor", "reduce-overhead")
        m = measure(ModelRef("toy-64"), Workload.create(device=where), strategy, QUICK)
        g = m.graphs
        ok = (m.feasible and g is not None and not g.cudagraph_skips
              and "overwritten" not in m.log_tail
              and m.timings.get("cuda_graph_recording_s", 0) > 0)  # fmt: skip
        skip = f"; skips {g.cudagraph_skips}: {g.cudagraph_skip_reason}" if g else ""
        lines.append(f"{'PASS' if ok else 'FAIL'} toy-64 {granularity} reduce-overhead: "
                     f"{m.status}, {m.speedup or 0:.2f}x, compile {m.compile_s or 0:.1f} s "
                     f"(recording {m.timings.get('cuda_graph_recording_s', 0):.2f} s){skip} "
                     f"{m.reason[:200]}")  # fmt: skip
    return lines


def llama_table(where: str) -> list[str]:
    ref = ModelRef("llama-3.2-1b")
    workload = Workload.create(device=where, seq_len=128, dtype="bfloat16")
    lines = [
        "| strategy | cold compile | latency | Accelerate's (H100) |",
        "| --- | --- | --- | --- |",
    ]
    for granularity in ("none", "full", "regional"):
        m = measure(ref, workload, Strategy.create(granularity, "inductor"), QUICK)
        theirs = ACCELERATE[granularity]
        ms = m.latency.median_ms if m.latency else float("nan")
        lines.append(f"| {granularity} | {m.compile_s or 0:.2f} s | {ms:.2f} ms | {theirs[0]} s "
                     f"/ {theirs[1]} ms |")  # fmt: skip
        if not m.feasible:
            lines.append(f"FAIL llama-3.2-1b {granularity}: {m.status} {m.reason[:300]}")
    return lines


def generate(where: str) -> list[str]:
    workload = Workload.create(device=where, dtype="bfloat16", kind="generate", new_tokens=32)
    m = measure(ModelRef("gemma-2b"), workload,
                Strategy.create("full", "inductor", "reduce-overhead"), QUICK)  # fmt: skip
    if not m.feasible or m.latency is None or m.ttft is None:
        return [f"FAIL gemma-2b generate reduce-overhead: {m.status} {m.reason[:300]}"]
    return [
        f"PASS gemma-2b generate reduce-overhead: decode {m.latency.median_ms:.2f} ms/token "
        f"(eager {m.eager_latency.median_ms:.2f}), TTFT {m.ttft.median_ms:.1f} ms, "
        f"{m.tokens_per_s:.0f} tokens/s, compile {m.compile_s:.1f} s"
    ]  # type: ignore[union-attr]


def generate_confirmation(where: str) -> list[str]:
    workload = Workload.create(device=where, dtype="bfloat16", kind="generate", new_tokens=16)
    strategies = [OVERHEAD, Strategy.create("regional", "inductor", "reduce-overhead")]
    m = confirm(GEMMA, workload, strategies, Settings(iters=5, warmup=2, timeout_s=900), [])
    rounds = {k: len(v) for k, v in m.rounds.items()}
    ok = (m.ok and "overwritten" not in m.log_tail
          and all(rounds.get(s.key) for s in [Strategy("none"), *strategies]))  # fmt: skip
    return [f"{'PASS' if ok else 'FAIL'} generate confirmation, reduce-overhead full and "
            f"regional in one process: {m.status}, rounds {rounds} {m.reason[:300]}"]  # fmt: skip


def generation_applied(where: str) -> list[str]:
    import torch

    import autotune

    workload = Workload.create(device=where, dtype="bfloat16", kind="generate", new_tokens=16)
    model, (prompt,) = catalog.build(GEMMA, workload)
    eager = model.generate(prompt, max_new_tokens=16, do_sample=False,
                           cache_implementation="static")[:, prompt.shape[1] :]  # fmt: skip
    gen = autotune.apply_generation(model, OVERHEAD)
    with device.cudagraph_skips() as skips:
        outs = [gen.generate(prompt, max_new_tokens=16, do_sample=False,
                             return_dict_in_generate=True) for _ in range(2)]  # fmt: skip
        found = skips()
    tokens = [o.sequences[:, prompt.shape[1] :] for o in outs]
    static = all(getattr(layer.keys, "_dynamo_static_input_type", None) == "unguarded"
                 for o in outs for layer in o.past_key_values.layers)  # fmt: skip
    same = int((tokens[0] == eager).all(dim=0).long().cumprod(0).sum())
    ok = (not found and static and torch.equal(tokens[0], tokens[1])
          and bool((tokens[0][:, 0] == eager[:, 0]).all()))  # fmt: skip
    why = f"; fallbacks: {found[:2]}" if found else ""
    return [f"{'PASS' if ok else 'FAIL'} apply_generation reduce-overhead: two generates, "
            f"cache marked static {static}, {same} of 16 tokens as eager's{why}"]  # fmt: skip


TRAFFIC = Workload(seq_len="16..512", requests=24, dtype="bfloat16")  # the check's traffic


def traffic(where: str) -> list[str]:
    import dataclasses

    import torch

    import autotune

    workload = dataclasses.replace(TRAFFIC, device=where)
    lines = []
    for extra in ({}, {"marks": "seq"}, {"buckets": "pow2"}, {"stance": "eager_on_recompile"}):
        strategy = Strategy.create("full", "inductor", "reduce-overhead", **extra)
        m = measure(GEMMA, workload, strategy, QUICK)
        t = m.traffic or {}
        ok = m.feasible and m.accuracy is not None and m.accuracy.passed and bool(t)
        lines.append(f"{'PASS' if ok else 'FAIL'} traffic {strategy.key}: {m.status}, ready "
                     f"{t.get('ready_s', 0):.1f} s (eager {t.get('eager_ready_s', 0):.1f}), "
                     f"{t.get('stalls', 0)} stalls, {len(t.get('ran_eager', []))} served eager, "
                     f"{m.speedup or 0:.2f}x; {m.accuracy.detail if m.accuracy else ''} "
                     f"{m.reason[:200]}")  # fmt: skip
    bucketed = Strategy.create("full", "inductor", "reduce-overhead", buckets="pow2")
    model, _ = catalog.build(GEMMA, workload)
    served = autotune.apply(model, bucketed)
    torch._dynamo.reset()
    with device.cudagraph_skips() as skips, torch.no_grad():
        for n in (17, 20, 31, 32, 33):  # buckets 32, 32, 32, 32, 64
            ids = torch.randint(0, 1000, (1, n), device=where)
            out = served(input_ids=ids, attention_mask=torch.ones_like(ids))
            assert out.logits.shape[1] == n
        found = skips()
    graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    ok = graphs == 2 and not found
    lines.append(
        f"{'PASS' if ok else 'FAIL'} apply of buckets=pow2 reduce-overhead: keyword "
        f"calls at 17..33 compiled {graphs} graphs (2 buckets); fallbacks {found[:2]}"
    )
    return lines


def precompiled_cuda_graphs(where: str) -> list[str]:
    settings = Settings(iters=5, warmup=2, timeout_s=900, starts=("cold", "precompiled"))
    strategy = Strategy.create("full", "inductor", "reduce-overhead", fullgraph=True)
    m = measure(ModelRef("toy-64"), Workload.create(device=where), strategy, settings)
    start = m.starts.get("precompiled")
    ok = (m.feasible and start is not None and start.status == "not-applicable"
          and "without CUDA graphs" in start.note)  # fmt: skip
    what = f"{start.status}: {start.note}" if start else f"no start ({m.status} {m.reason[:200]})"
    return [f"{'PASS' if ok else 'FAIL'} precompiled start of {strategy.key}: {what}"]


def _cli(*argv: str, cwd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *argv], cwd=cwd,
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=1800)  # fmt: skip


def portable_elsewhere(where: str) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        out = _cli("search", "--model", "toy-64", "--device", "cuda:1", "--granularity", "full",
                   "--backend", "inductor", "--mode", "default", "--options", "none",
                   "--dynamic", "none", "--fullgraph", "false", "--trials", "1",
                   "--no-progress", "--no-confirm", "--study", "elsewhere", "--out",
                   "best.json", cwd=folder)  # fmt: skip
        if out.returncode != 0:
            return [f"FAIL search on cuda:1: {out.stderr[-500:]}"]
        code = ("import autotune,torch,warnings;from autotune.catalog import ModelRef,build;"
                "from autotune.workload import Workload;"
                "m,i=build(ModelRef('toy-64'),Workload(device='cuda:0'));"
                "warnings.simplefilter('error');"
                "autotune.apply(m,'best.json',trust_artifact=True)(*i);print('hit')")  # fmt: skip
        done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True,
                              text=True, timeout=900)  # fmt: skip
        ok = done.returncode == 0 and "hit" in done.stdout
        return [f"{'PASS' if ok else 'FAIL'} an artefact made on cuda:1 loads and hits on "
                f"cuda:0 {done.stderr[-300:] if not ok else ''}"]  # fmt: skip


def two_workers(where: str) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        argv = ["search", "--model", "toy-64", "--device", "cuda", "--backend", "inductor,eager",
                "--granularity", "none,full,regional", "--options", "none", "--trials", "6",
                "--workers", "2", "--no-progress", "--json"]  # fmt: skip
        out = _cli(*argv, cwd=folder)
        ok = out.returncode == 0
        measured = json.loads(out.stdout)["measured"] if ok else 0
        return [f"{'PASS' if ok else 'FAIL'} search --workers 2: {measured} measured "
                f"{out.stderr[-300:] if not ok else ''}"]  # fmt: skip


def plan() -> list[Check]:
    one = Workload(device="cpu")
    bf16 = Workload(device="cpu", dtype="bfloat16")
    gen = Workload(device="cpu", dtype="bfloat16", kind="generate", new_tokens=4)
    short = ModelRef("gemma-2b", layers=1)
    return [
        Check("CUDA events vs perf_counter", [], events_agree),
        Check("reduce-overhead on toy-64", [(ModelRef("toy-64", layers=1), one)], cuda_graphs),
        Check(
            "llama-3.2-1b beside Accelerate",
            [(ModelRef("llama-3.2-1b", layers=1), bf16)],
            llama_table,
        ),
        Check("generate on gemma-2b", [(ModelRef("gemma-2b", layers=1), gen)], generate),
        Check("generate confirmation", [(short, gen)], generate_confirmation),
        Check("apply_generation", [(short, gen)], generation_applied),
        Check(
            "precompiled CUDA graphs",
            [(ModelRef("toy-64", layers=1), one)],
            precompiled_cuda_graphs,
        ),
        Check(
            "portable start on another index",
            [(ModelRef("toy-64", layers=1), one)],
            portable_elsewhere,
            gpus=2,
        ),
        Check("search --workers 2", [(ModelRef("toy-64", layers=1), one)], two_workers, gpus=2),
        Check(
            "a traffic with reduce-overhead", [(ModelRef("gemma-2b", layers=1), TRAFFIC)], traffic
        ),
    ]


def dry_run(checks: list[Check]) -> int:
    """What can be checked without a GPU: the plan's strategies and workloads parse, its models
    build at one layer, its commands parse."""
    from autotune.cli import build_parser

    users: dict[tuple[ModelRef, Workload], list[str]] = {}
    for check in checks:
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
    if "without CUDA graphs" not in ahead.not_applicable("precompiled", refused, "inference", 0):
        print("dry run: a precompiled CUDA-graph start would not be refused")
        return 1
    parser = build_parser()
    parser.parse_args(["search", "--model", "toy-64", "--device", "cuda:1", "--trials", "1"])
    parser.parse_args(["search", "--model", "toy-64", "--workers", "2", "--json"])
    print("dry run: the plan is sound")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="check the plan on any machine")
    p.add_argument("--out", default="gpu-acceptance.json", help="where the results go")
    p.add_argument("--only", default="", help="run these checks alone, by number: 1,2,10")
    args = p.parse_args()
    checks = plan()
    if args.only:
        try:
            chosen = sorted({int(n) for n in args.only.split(",")})
        except ValueError:
            p.error(f"--only takes check numbers 1..{len(checks)} separated by commas")
        if not all(1 <= n <= len(checks) for n in chosen):
            p.error(f"--only takes check numbers 1..{len(checks)}")
        checks = [checks[n - 1] for n in chosen]
    if args.dry_run:
        return dry_run(checks)
    gpus = device.count()
    if not gpus:
        print("no CUDA device: run with --dry-run, or on a GPU machine")
        return 1
    results, failed = {}, 0
    for check in checks:
        if check.gpus > gpus:
            print(f"SKIP {check.name}: needs {check.gpus} GPUs, {gpus} visible")
            continue
        start = time.perf_counter()
        try:
            lines = check.run("cuda:0")
        except Exception as exc:  # one check's crash is that check's FAIL, not the run's end
            lines = [f"FAIL {check.name}: {type(exc).__name__}: {str(exc)[:500]}"]
        failed += sum(line.startswith("FAIL") for line in lines)
        results[check.name] = lines
        print(f"== {check.name} ({time.perf_counter() - start:.0f} s)")
        print("\n".join(lines), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"{failed} failed; results in {args.out}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
