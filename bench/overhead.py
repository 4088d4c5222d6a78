"""Harness overhead: a trial's wall time minus the child's compile and timing work.

    python bench/overhead.py                      # runs a small toy-64 search to measure
    python bench/overhead.py --storage URL --study NAME   # reads a finished study instead

For each measured trial: overhead = parent-seen wall time - (eager first call + cold compile
+ warm-up + interleaved timing). It splits the rest into process start-up (the fork from the
preloaded server), model build, and the remainder. With a fresh search it also reports the
parent's own time per trial outside the child (Optuna ask/tell and autotune's SQL writes).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from autotune.search import open_search, run
from autotune.search.spec import StudySpec
from autotune.storage import Store
from autotune.trial.measurement import Measurement


def child_overhead(m: Measurement) -> dict[str, float]:
    t = m.timings
    work = (m.compile_s or 0) + (m.eager_first_s or 0) + t.get("timing_s", 0.0)
    work += t.get("warmup_s", 0.0)  # warm-up calls, which also read the peak memory
    wall = m.wall_s or 0.0
    return {
        "wall_s": wall,
        "work_s": work,
        "overhead_s": wall - work,
        "startup_s": t.get("startup_s", 0.0),
        "build_s": t.get("build_s", 0.0),
    }


def report(rows: list[dict[str, float]], label: str) -> None:
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    worst = max(r["overhead_s"] for r in rows)
    share = statistics.median(r["overhead_s"] / r["wall_s"] for r in rows)
    print(
        f"| {label} | {len(rows)} | {med['wall_s']:.2f} s | {med['work_s']:.2f} s | "
        f"{med['overhead_s']:.2f} s (worst {worst:.2f} s) | {share:.0%} | "
        f"{med['startup_s']:.2f} s | {med['build_s']:.2f} s |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--storage")
    p.add_argument("--study")
    p.add_argument("--trials", type=int, default=8)
    args = p.parse_args()
    header = (
        "| study | trials | wall (median) | compile + timing | overhead | share of "
        "wall | start-up | build |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    if args.study:
        store = Store(args.storage, create=False)
        rows = [
            child_overhead(Measurement.from_dict(r.payload))
            for r in store.measurements(args.study)
            if r.status == "ok" and r.payload.get("wall_s")
        ]
        print(header)
        report(rows, args.study)
        return
    with tempfile.TemporaryDirectory() as folder:
        spec = StudySpec.from_sources(
            None,
            model="toy-64",
            device="cpu",
            backend="eager,aot_eager",
            trials=args.trials,
            iters=20,
            study="overhead",
        )
        search = open_search(spec, f"sqlite:///{folder}/o.db")
        inside = []
        original = search.measure

        def timed_measure(strategy):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            m = original(strategy)
            inside.append(time.perf_counter() - start)
            return m

        search.measure = timed_measure  # type: ignore[method-assign]
        start = time.perf_counter()
        outcome = run(search)
        total = time.perf_counter() - start
        rows = [
            child_overhead(Measurement.from_dict(r.payload))
            for r in search.store.measurements("overhead")
            if r.status == "ok"
        ]
        print(header)
        report(rows, "toy-64 eager/aot_eager")
        steps = outcome.measured_here + outcome.repeats
        parent = (total - sum(inside)) / max(1, steps)
        print(
            f"\nparent-side time per trial outside the child (Optuna + SQL, SQLite): "
            f"{parent * 1e3:.0f} ms over {steps} trials ({outcome.repeats} repeats)"
        )


if __name__ == "__main__":
    main()
