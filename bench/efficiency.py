"""Search efficiency: replay the samplers against a recorded exhaustive grid.

Record the grid once (every canonical strategy of the default space, measured for real):

    autotune search --model toy-64 --sampler grid --trials 1000 --iters 10 --no-progress \
        --study toy64-grid --storage sqlite:///bench/results/toy64-grid.db

then replay each sampler over 10 seeds through autotune's own search loop (de-duplication and
all), with each measurement looked up in the record instead of run:

    python bench/efficiency.py --record sqlite:///bench/results/toy64-grid.db --study toy64-grid

It prints, per sampler, how many measured strategies each seed needed to reach 95 % of the
exhaustive Pareto front's hypervolume (compile time vs latency, eager included), with both
objectives normalised by the exhaustive front (ideal 0, nadir 1) and the reference point at 1.1.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from autotune.measurement import Measurement
from autotune.selection import Point, candidates, pareto
from autotune.spec import StudySpec
from autotune.store import Store
from autotune.strategy import Strategy
from autotune.study import Search


class Scale:
    """Objectives normalised by the exhaustive front: its ideal at 0, its nadir at 1."""

    def __init__(self, front: list[Point]) -> None:
        self.lo = (min(p.compile_s for p in front), min(p.latency_ms for p in front))
        self.hi = (max(p.compile_s for p in front), max(p.latency_ms for p in front))

    def __call__(self, p: Point) -> tuple[float, float]:
        return tuple(  # type: ignore[return-value]
            (v - lo) / (hi - lo) if hi > lo else 0.0
            for v, lo, hi in zip((p.compile_s, p.latency_ms), self.lo, self.hi, strict=True)
        )


def hypervolume(points: list[Point], scale: Scale, ref: float = 1.1) -> float:
    """Area the points dominate (minimising both) inside the box up to ``ref`` x the nadir."""
    area, best_latency = 0.0, ref
    for c, lat in sorted(scale(p) for p in points):
        if c < ref and lat < best_latency:  # each step down adds a strip to the box's edge
            area += (ref - c) * (best_latency - lat)
            best_latency = lat
    return area


class Replay(Search):
    """A search whose measurements come from the record, not from a child process."""

    record: dict[str, Measurement]

    def measure(self, strategy: Strategy) -> Measurement:
        return self.record[strategy.key]


def replay(record: dict[str, Measurement], spec: StudySpec, target: float, scale: Scale) -> int:
    """Measured strategies needed to reach ``target`` of the full hypervolume."""
    with tempfile.TemporaryDirectory() as folder:
        search = Replay(spec, f"sqlite:///{folder}/replay.db")
        search.record = record
        search.baseline()
        for n in range(1, len(search.members) + 1):
            spec_n = StudySpec.from_dict({**spec.to_dict(), "trials": n})
            search.spec = spec_n
            search.run(progress=False)
            hv = hypervolume(candidates(search.store, search.name), scale)
            if hv >= target:
                return len(search.measured())
    return len(record)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--record", default="sqlite:///bench/results/toy64-grid.db")
    p.add_argument("--study", default="toy64-grid")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--samplers", default="tpe,nsga2,random")
    p.add_argument("--fraction", type=float, default=0.95)
    args = p.parse_args()
    store = Store(args.record, create=False)
    row = store.study(args.study)
    assert row is not None, f"no study {args.study} in {args.record}"
    record = {r.key: Measurement.from_dict(r.payload) for r in store.measurements(args.study)}
    recorded = StudySpec.from_dict(row.spec)
    everything = candidates(store, args.study)
    front = pareto(everything)
    scale = Scale(front)
    full = hypervolume(everything, scale)
    size = len(recorded.space.validate(recorded.workload.device))
    print(
        f"record: {len(record)} strategies ({size} in the space), "
        f"{len(everything)} feasible; exhaustive front: {', '.join(p.key for p in front)}"
    )
    budget = 0.3 * size
    print(
        f"\n| sampler | measured strategies to reach {args.fraction:.0%} of the hypervolume "
        f"(10 seeds) | median | worst | seeds within 30 % of the space ({budget:.0f}) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for sampler in args.samplers.split(","):
        needed = []
        for seed in range(args.seeds):
            spec = StudySpec.from_dict(
                {
                    **recorded.to_dict(),
                    "sampler": sampler,
                    "study": f"replay-{sampler}-{seed}",
                    "settings": {**recorded.to_dict()["settings"], "seed": seed},
                }
            )
            needed.append(replay(record, spec, args.fraction * full, scale))
        within = sum(n <= budget for n in needed)
        print(
            f"| {sampler} | {', '.join(map(str, needed))} | {statistics.median(needed):g} | "
            f"{max(needed)} | {within}/{len(needed)} |",
            flush=True,
        )


if __name__ == "__main__":
    Path("bench/results").mkdir(parents=True, exist_ok=True)
    main()
