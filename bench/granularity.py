"""toy-64 with inductor, cold: full vs regional vs nested (and eager), N repeats, as ratios.

    python bench/granularity.py [--repeats 3] [--model toy-64] [--layers N] [--dtype float32]

Each trial is a fresh process with empty compile caches (autotune.trial.parent). Repeats run
round-robin so that drift in the machine's speed falls on every granularity alike.
"""

from __future__ import annotations

import argparse
import statistics

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.parent import measure
from autotune.workload import Settings, Workload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="toy-64")
    p.add_argument("--layers", type=int)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    ref = ModelRef(args.model, layers=args.layers)
    workload = Workload(dtype=args.dtype)
    names = ("full", "regional", "nested")
    runs: dict[str, list] = {n: [] for n in names}
    for r in range(args.repeats):
        for name in names:
            m = measure(ref, workload, Strategy.create(name, "inductor"), Settings(args.iters))
            assert m.ok and m.accuracy and m.accuracy.passed, (name, m.status, m.reason)
            runs[name].append(m)
            print(
                f"repeat {r + 1} {name:8s} compile {m.compile_s:6.2f} s  latency "
                f"{m.latency.median_ms:7.3f} ms  eager {m.eager_latency.median_ms:7.3f} ms  "
                f"speedup {m.speedup:.2f}x  wall {m.wall_s:.1f} s",
                flush=True,
            )

    def med(name: str, key) -> float:
        return statistics.median(key(m) for m in runs[name])

    full_c = med("full", lambda m: m.compile_s)
    print(f"\n| granularity | compile (median of {args.repeats}) | vs full | latency | speedup |")
    print("| --- | --- | --- | --- | --- |")
    for name in names:
        c = med(name, lambda m: m.compile_s)
        lat = med(name, lambda m: m.latency.median_ms)
        sp = med(name, lambda m: m.speedup)
        print(f"| {name} | {c:.2f} s | {c / full_c:.2f} | {lat:.3f} ms | {sp:.2f}x |")


if __name__ == "__main__":
    main()
