"""Each dynamic / mark / bucket choice of one model over one traffic: time to ready, stalls,
recompile-limit hits, the weighted steady latency, and the pick for a short and a long life.

    python bench/traffic.py --model gemma-2b --layers 2 --dtype bfloat16 --seq-len 16..256 \\
        --requests 16

Every strategy is measured cold in a fresh process, as a search's trial is (``autotune.measure``);
eager is measured too. The picks use the search's own rule (``amortized:CALLS``: the lowest time
to ready + CALLS x latency, latencies on eager's common scale, a speedup the sign test does not
show counting as none). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from autotune.catalog import ModelRef
from autotune.choice.selection import Point, pick
from autotune.strategy import Strategy
from autotune.traffic import describe
from autotune.trial.measurement import Measurement
from autotune.trial.parent import measure
from autotune.workload import Settings, Workload

CHOICES = (
    {"dynamic": False},
    {"dynamic": None},
    {"dynamic": True},
    {"dynamic": None, "marks": "seq"},
    {"dynamic": None, "marks": "seq-unbacked"},
    {"buckets": "pow2"},
    {"buckets": "quantiles"},
    {"dynamic": False, "stance": "eager_on_recompile"},
)


def traffic_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of a benchmark over a traffic: the model, its traffic, backend and rounds."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--model", default="gemma-2b")
    p.add_argument("--layers", type=int)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--seq-len", default="16..256")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--iters", type=int, default=6)
    return p


Measured = list[tuple[Measurement, float]]


def measure_each(args: argparse.Namespace, w: Workload, choices: tuple[dict[str, Any], ...],
                 timeout_s: float = 900) -> tuple[Measured, Measurement]:  # fmt: skip
    """Eager and each of ``choices`` at ``full``, cold in fresh processes, with the seconds
    each took; and eager's measurement. Prints the model and the traffic first."""
    ref = ModelRef(args.model, layers=args.layers)
    settings = Settings(iters=args.iters, warmup=1, starts=("cold",), timeout_s=timeout_s)
    print(f"{args.model} --layers {args.layers} {args.dtype}, {describe(w.traffic)}, "
          f"{args.backend}\n")  # fmt: skip
    strategies = [Strategy("none")] + [Strategy.create("full", args.backend, **c) for c in choices]
    measured = []
    for s in strategies:
        t = time.perf_counter()
        m = measure(ref, w, s, settings)
        measured.append((m, time.perf_counter() - t))
    return measured, next(m for m, _ in measured if m.strategy.key == "none")


def main() -> None:
    p = traffic_parser(__doc__)
    p.add_argument("--calls", default="1000,1000000")
    args = p.parse_args()
    w = Workload(seq_len=args.seq_len, requests=args.requests, dtype=args.dtype)
    measured, base = measure_each(args, w, CHOICES)
    points = [Point.of(m, None, base) for m, _ in measured if m.ok and m.accuracy.passed]
    print(
        "| strategy | trial s | time to ready s (+ over eager) | requests that compiled | "
        "worst stall s | requests that ran eager | weighted latency ms (x eager) | accuracy |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for m, wall in measured:
        t = m.traffic or {}
        if not m.ok:
            print(f"| {m.strategy.key} | {wall:.0f} | {m.status}: {m.reason[:80]} | | | | | |")
            continue
        point = Point.of(m, None, base)
        if m.strategy.key == "none":
            m.speedup = 1.0  # the baseline
        eager_after = len(t.get("ran_eager", []))
        print(f"| {m.strategy.key} | {wall:.0f} | {t['ready_s']:.1f} (+{m.compile_s:.1f}) | "
              f"{t['stalls']} of {t['requests']} | {t['worst_stall_ms'] / 1e3:.1f} | "
              f"{eager_after or 'none'} | {point.latency_ms:.1f} ({m.speedup:.3f}"
              f"{'' if point.significant or m.strategy.key == 'none' else ', not shown'}) | "
              f"{'pass' if m.accuracy.passed else 'FAIL'} |")  # fmt: skip
    for calls in args.calls.split(","):
        chosen = pick(points, f"amortized:{calls}")
        print(f"\npick for {int(calls):,} calls: {chosen.key} "
              f"({chosen.total_s(float(calls)):.1f} s over the lifetime)")  # fmt: skip


if __name__ == "__main__":
    main()
