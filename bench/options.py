"""Do Inductor's options change the CPU answer? gemma-2b (bfloat16, batch 1, 32 tokens).

    python bench/options.py [--repeats 3] [--iters 5] [--warmup 1] [--raw FILE]

Each trial is autotune's own cold measurement (a fresh process with empty caches): eager, then
``full/inductor/default``, the same with ``freezing``, and with ``freezing+cpp_wrapper``. Every
trial times its compiled calls interleaved with eager's in its own process, so its speedup is a
ratio within one process; repeats run round-robin, each in its own order. It prints, per
strategy, the median cold compile, the median speedup over eager and the compile time as a
ratio to ``full/inductor/default``'s. ``--raw`` appends every measurement as a JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.trial.parent import Settings, measure
from autotune.workload import Workload

STRATEGIES = [
    Strategy.create("full", "inductor", "default"),
    Strategy.create("full", "inductor", "default", None, False, ["freezing"]),
    Strategy.create("full", "inductor", "default", None, False, ["freezing", "cpp_wrapper"]),
]


def table(results: dict[str, list[Measurement]]) -> list[str]:
    """Median compile and speedup per strategy, and compile as a ratio to plain inductor's."""
    base = STRATEGIES[0].key
    plain = statistics.median(m.compile_s or 0.0 for m in results.get(base, []) if m.ok) \
        if any(m.ok for m in results.get(base, [])) else None  # fmt: skip
    lines = [
        "| strategy | cold compile, s (median, runs) | speedup vs eager (median, runs) | "
        "compile vs full/inductor/default | failed |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, ms in results.items():
        ok = [m for m in ms if m.ok]
        failed = [m.reason.splitlines()[0][:80] for m in ms if not m.ok]
        if not ok:
            lines.append(f"| {key} | — | — | — | {len(failed)}: {failed[0] if failed else ''} |")
            continue
        compiles = [m.compile_s or 0.0 for m in ok]
        speedups = [m.speedup or 0.0 for m in ok]
        ratio = f"{statistics.median(compiles) / plain:.2f}x" if plain else "—"
        runs = ", ".join(f"{c:.1f}" for c in compiles)
        lines.append(
            f"| {key} | {statistics.median(compiles):.1f} ({runs})"
            f" | {statistics.median(speedups):.2f}x ({', '.join(f'{s:.2f}' for s in speedups)}) "
            f"| {ratio} | {len(failed)} |"
        )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="gemma-2b")
    p.add_argument("--layers", type=int)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--raw")
    args = p.parse_args()
    ref = ModelRef(args.model, args.layers)
    workload = Workload.create(dtype="bfloat16", device="cpu")
    settings = Settings(args.iters, args.warmup, 3600.0, 0, ("cold",))
    results: dict[str, list[Measurement]] = {s.key: [] for s in STRATEGIES}
    for repeat in range(args.repeats):
        order = STRATEGIES[repeat % len(STRATEGIES) :] + STRATEGIES[: repeat % len(STRATEGIES)]
        for strategy in order:
            m = measure(ref, workload, strategy, settings)
            results[strategy.key].append(m)
            print(f"repeat {repeat}: {strategy.key}: {m.status} compile {m.compile_s} s, "
                  f"speedup {m.speedup}, eager {m.eager_latency and m.eager_latency.median_ms} ms"
                  f"{'' if m.ok else ' — ' + m.reason[:200]}", flush=True)  # fmt: skip
            if args.raw:
                with open(args.raw, "a") as f:
                    f.write(json.dumps(m.to_dict()) + "\n")
    print(f"\n{args.model}{f' --layers {args.layers}' if args.layers else ''}, bfloat16, batch 1, "
          f"32 tokens, {args.iters} timed calls after {args.warmup} warm-up, cold starts, "
          f"{args.repeats} repeats; eager is 1.00x by definition\n")  # fmt: skip
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
