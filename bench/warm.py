"""Cold vs warm vs portable starts, per strategy, as ratios to cold, with the cache counters.

    python bench/warm.py [--repeats 3] [--cases toy,gemma] [--raw FILE] [--tables FILE ...]

Cases: toy-64 full, regional and nested (inductor, float32; 10 timed calls after 3 warm-ups)
and gemma-2b ``--layers 2`` (bfloat16; 3 timed calls after 1 warm-up, since one bf16 call
takes seconds on a CPU). Each trial is autotune's own (autotune.trial.parent.measure): a cold child
with empty caches, a warm child in the cold one's cache directories, and a portable child in
empty ones that loads the cold one's saved artefact first. Repeats run round-robin within a
case. ``--raw`` appends each measurement as a JSON line; ``--tables`` prints the tables from
such files alone.
It ends with what counting restarts does to the choice: ``cold + (S-1) warm + S C latency``
against eager's ``S C latency`` for a few services of S starts and C calls per start.

    python bench/warm.py --cases "" --ship-dir 3

measures the alternative for a CPU, whose mega-cache lacks the C++ kernels: a cold start in
cache directory A, A copied to a new path B (as into a container image), then a start with
``TORCHINDUCTOR_CACHE_DIR=B`` (plain ``python -m autotune.trial.child`` processes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.trial.parent import Settings, measure
from autotune.workload import Workload

TOY, GEMMA = Settings(iters=10, warmup=3), Settings(iters=3, warmup=1)
CASES = {
    "toy": [
        (ModelRef("toy-64"), Workload(device="cpu"), g, TOY)
        for g in ("full", "regional", "nested")
    ],
    "gemma": [
        (ModelRef("gemma-2b", layers=2), Workload(device="cpu", dtype="bfloat16"), g, GEMMA)
        for g in ("full", "regional")
    ],
}
SERVICES = ((1, 10**5), (10, 10**4), (10, 10**5), (100, 10**4), (1000, 10**4))  # (S, C)


def label(ref: ModelRef, granularity: str) -> str:
    layers = f" --layers {ref.layers}" if ref.layers else ""
    return f"{ref.name}{layers} {granularity}"


def hits(m: Measurement, kind: str) -> str:
    c = m.starts[kind].cache
    return f"{c.get('fxgraph_cache_hit', 0)}/{c.get('fxgraph_cache_miss', 0)}"


def line(r: int, name: str, m: Measurement) -> str:
    s = m.starts
    cold, warm, port = (s[k].compile_s or 0.0 for k in ("cold", "warm", "portable"))
    added = (s["warm"].wall_s or 0.0) + (s["portable"].wall_s or 0.0)
    notes = "; ".join(s[k].note for k in ("warm", "portable") if s[k].note)
    return (
        f"repeat {r + 1} {name:24s} cold {cold:6.2f} s  warm {warm:6.2f} s ({warm / cold:.2f})  "
        f"portable {port:6.2f} s ({port / cold:.2f}, load {s['portable'].load_s:.2f} s)  "
        f"dynamo warm {s['warm'].phases.get('dynamo_s', 0):.2f} s  fx hit/miss cold "
        f"{hits(m, 'cold')} warm {hits(m, 'warm')} portable {hits(m, 'portable')}  "
        f"artefact {(m.artifact or {}).get('bytes', 0) / 2**20:.2f} MiB  speedup cold "
        f"{m.speedup:.2f}x warm {s['warm'].speedup or 0:.2f}x portable "
        f"{s['portable'].speedup or 0:.2f}x  added wall {added:.1f} s"
        + (f"  [{notes}]" if notes else "")
    )


def child_start(folder: str, tag: str, caches: str) -> Measurement:
    """One toy-64 full inductor start as a plain child process with the given cache folder."""
    spec = {
        "kind": "trial", "strategy": Strategy.create("full", "inductor").to_dict(),
        "model": ModelRef("toy-64").to_dict(), "workload": Workload(device="cpu").to_dict(),
        "iters": 5, "warmup": 1, "seed": 0,
    }  # fmt: skip
    spec_path, result_path = os.path.join(folder, f"{tag}.spec"), os.path.join(folder, tag)
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": caches}
    subprocess.run([sys.executable, "-m", "autotune.trial.child", spec_path, result_path], env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    with open(result_path) as f:
        return Measurement.from_dict(json.load(f))


def ship_dir(repeats: int) -> None:
    """Cold in A; A copied to B; a start in B: what shipping the cache directory buys."""
    print("\nshipping the cache directory (toy-64 full, inductor):")
    for r in range(repeats):
        with tempfile.TemporaryDirectory() as folder:
            a, b = os.path.join(folder, "a"), os.path.join(folder, "image", "cache")
            cold = child_start(folder, "cold", a)
            shutil.copytree(a, b)
            size = sum(f.stat().st_size for f in Path(b).rglob("*") if f.is_file()) / 2**20
            shipped = child_start(folder, "shipped", b)
            c = shipped.cache
            print(
                f"  repeat {r + 1}: cold {cold.compile_s:.2f} s, start from the copied directory "
                f"{shipped.compile_s:.2f} s ({shipped.compile_s / cold.compile_s:.2f} of cold), "
                f"FX hit/miss {c['fxgraph_cache_hit']}/{c['fxgraph_cache_miss']}, backend "
                f"{shipped.phases.get('backend_s', 0):.2f} s, directory {size:.2f} MiB",
                flush=True,
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cases", default="toy,gemma")
    p.add_argument("--ship-dir", type=int, default=0, help="repeats of the directory probe")
    p.add_argument("--raw", help="append each measurement to this file as a JSON line")
    p.add_argument("--tables", nargs="*", help="print the tables from --raw files, measure none")
    args = p.parse_args()
    if args.tables:
        runs: dict[str, list[Measurement]] = {}
        for path in args.tables:
            for text in Path(path).read_text().splitlines():
                m = Measurement.from_dict(json.loads(text))
                ref = ModelRef.from_dict(m.model)
                runs.setdefault(label(ref, m.strategy.granularity), []).append(m)
        tables(runs)
        return
    cases = [c for name in args.cases.split(",") if name for c in CASES[name]]
    if args.ship_dir:
        ship_dir(args.ship_dir)
    runs = {label(ref, g): [] for ref, _, g, _ in cases}
    began = time.perf_counter()
    for group in dict.fromkeys(args.cases.split(",")) if cases else ():
        for r in range(args.repeats):
            for ref, workload, g, settings in CASES[group]:
                m = measure(ref, workload, Strategy.create(g, "inductor"), settings)
                assert m.ok and m.accuracy and m.accuracy.passed, (g, m.status, m.reason)
                assert all(m.starts[k].status == "ok" for k in ("warm", "portable")), m.starts
                runs[label(ref, g)].append(m)
                print(line(r, label(ref, g), m), flush=True)
                if args.raw:
                    with open(args.raw, "a") as f:
                        f.write(json.dumps(m.to_dict()) + "\n")
    if cases:
        print(f"\ntotal {time.perf_counter() - began:.0f} s")
        tables(runs)


def tables(runs: dict[str, list[Measurement]]) -> None:
    """The summary table, break-even calls and restarts, medians over the repeats."""

    def med(name: str, fn) -> float:  # type: ignore[no-untyped-def]
        return statistics.median(fn(m) for m in runs[name])

    print(
        "\n| strategy | cold | warm | portable (load) | warm / cold | portable / cold | dynamo "
        "share of warm | backend of portable | FX hit/miss warm, portable | artefact | added wall "
        "(cold trial's wall) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, ms in runs.items():
        cold = med(name, lambda m: m.starts["cold"].compile_s)
        warm = med(name, lambda m: m.starts["warm"].compile_s)
        port = med(name, lambda m: m.starts["portable"].compile_s)
        load = med(name, lambda m: m.starts["portable"].load_s)
        wr = med(name, lambda m: m.starts["warm"].compile_s / m.starts["cold"].compile_s)
        pr = med(name, lambda m: m.starts["portable"].compile_s / m.starts["cold"].compile_s)
        dyn = med(name, lambda m: m.starts["warm"].phases.get("dynamo_s", 0)
                  / m.starts["warm"].compile_s)  # fmt: skip
        backend = med(name, lambda m: m.starts["portable"].phases.get("backend_s", 0))
        added = med(name, lambda m: m.starts["warm"].wall_s + m.starts["portable"].wall_s)
        wall = med(name, lambda m: m.wall_s)
        size = med(name, lambda m: (m.artifact or {}).get("bytes", 0)) / 2**20
        counts = ", ".join(sorted({f"{hits(m, 'warm')} {hits(m, 'portable')}" for m in ms}))
        print(
            f"| {name} | {cold:.2f} s | {warm:.2f} s | {port:.2f} s ({load:.2f} s) | {wr:.2f} | "
            f"{pr:.2f} | {dyn:.0%} | {backend:.2f} s | {counts} | {size:.2f} MiB | {added:.1f} s "
            f"({wall:.1f} s) |"
        )

    print("\nbreak-even: calls after which a start pays for itself against eager")
    for name in runs:
        saved_ms = med(name, lambda m: m.eager_latency.median_ms - m.latency.median_ms)
        costs = [
            med(name, lambda m, k=k: m.starts[k].compile_s) for k in ("cold", "warm", "portable")
        ]
        shown = (
            ", ".join(
                f"{k} {c / saved_ms * 1e3:,.0f} calls"
                for k, c in zip(("cold", "warm", "portable"), costs, strict=True)
            )
            if saved_ms > 0
            else "never (no faster than eager)"
        )
        print(f"  {name}: {shown}")

    print("\nrestarts: total seconds cold + (S-1) warm + S C latency, eager S C latency "
          "(latency: median of each trial's own, eager: its interleaved eager)")  # fmt: skip
    for model in sorted({n.split(" ")[0] for n in runs}):
        names = [n for n in runs if n.startswith(model + " ")]
        eager_ms = statistics.median(m.eager_latency.median_ms for n in names for m in runs[n])
        for starts, calls in SERVICES:
            totals = {"eager": starts * calls * eager_ms / 1e3}
            for n in names:
                cold = med(n, lambda m: m.compile_s)
                warm = med(n, lambda m: m.starts["warm"].compile_s)
                lat = med(n, lambda m: m.latency.median_ms)
                totals[n] = cold + (starts - 1) * warm + starts * calls * lat / 1e3
            best = min(totals, key=totals.__getitem__)
            cold_only = dict(totals)  # the same service if every start compiled cold
            for n in names:
                cold_only[n] = starts * med(n, lambda m: m.compile_s) + (
                    starts * calls * med(n, lambda m: m.latency.median_ms) / 1e3
                )
            best_cold = min(cold_only, key=cold_only.__getitem__)
            shown = ", ".join(f"{k.removeprefix(model + ' ')} {v:.1f}" for k, v in totals.items())
            print(f"  {model} S={starts} C={calls}: {shown} -> best {best} "
                  f"(every start cold: {best_cold})")  # fmt: skip


if __name__ == "__main__":
    main()
