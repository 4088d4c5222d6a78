"""Search efficiency: replay the search against a recorded exhaustive grid.

Record a grid once (every canonical strategy of a space, measured for real), e.g.:

    autotune search --model toy-64 --sampler grid --trials 1000 --iters 10 --no-progress \
        --study toy64-grid --storage sqlite:///bench/results/toy64-grid.db

then replay the search over 10 seeds through autotune's own loop (steering, de-duplication and
deduction included), each measurement looked up in the record instead of run:

    python bench/efficiency.py --record sqlite:///bench/results/toy64-grid.db --study toy64-grid

The space, workload and objectives come from the record's stored spec, so older and newer
records replay without code changes. A strategy of that space missing from the record counts as
unmeasurable (a failed trial, reported), never guessed.

Each replay has a fixed budget (``--budget``, default 20 % of the space, as a user's
``--trials``) and reports how many *measured* strategies it took to reach 95 % of the exhaustive
Pareto front's hypervolume (compile time vs latency, eager included; both objectives normalised
by the exhaustive front, reference point 1.1), or ``>B`` when the budget ran out first. Deduced
strategies cost nothing and are not counted. ``s`` is the measuring time spent until then (the
record's wall time of each measured strategy).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from sqlalchemy.engine import make_url

from autotune.measurement import Measurement
from autotune.metrics import failure_stage_of
from autotune.search import Search, open_search, run
from autotune.search.deduction import Tactics
from autotune.selection import Point, candidates, pareto
from autotune.spec import StudySpec
from autotune.storage import Store
from autotune.strategy import Strategy

NONE = Tactics(False, False, False, False, False)
VARIANTS = {  # name: tactics
    "default": Tactics(),
    "all": Tactics(True, True, True, True, True),
    "none": NONE,
    "anchors": Tactics(True, False, False, False, False),
    "implication": Tactics(False, True, False, False, False),
    "equivalence": Tactics(False, False, True, False, False),
    "exhaustive": Tactics(False, False, False, True, False),
    "cheap-first": Tactics(False, False, False, False, True),
    "all-but-cheap-first": Tactics(True, True, True, True, False),
    "all-but-equivalence": Tactics(True, True, False, True, True),
}


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


class Trace:
    """A search's listener that notes, after every measured strategy, how many are measured,
    the record's seconds spent measuring them, and the hypervolume of what is stored."""

    def __init__(self, search: Search, record: dict[str, Measurement], scale: Scale) -> None:
        self.search, self.record, self.scale = search, record, scale
        self.trace: list[tuple[int, float, float]] = []

    def now(self, what: str) -> None:
        pass

    def note(self, line: str) -> None:
        pass

    def measured(self, key: str, done: int) -> None:
        search = self.search
        measured = search.measured()
        spent = sum(self.record[k].wall_s or 0.0 for k in measured if k in self.record)
        hv = hypervolume(candidates(search.store.measurements(search.name)), self.scale)
        self.trace.append((len(measured), spent, hv))


def replay(record: dict[str, Measurement], spec: StudySpec, tactics: Tactics, scale: Scale,
           target: float) -> tuple[int | None, float, float, set[str]]:  # fmt: skip
    """(measured strategies needed, seconds spent then, hypervolume at the budget, missing).
    autotune's own loop runs, with each measurement looked up in the record."""
    missing: set[str] = set()

    def lookup(strategy: Strategy) -> Measurement:
        if strategy.key not in record:
            missing.add(strategy.key)
            return Measurement(strategy.to_dict(), {}, {}, "failed", reason="not in the record")
        m = record[strategy.key]
        if not m.ok and not m.stage:  # recorded before failures had a stage: read its reason
            m.stage = failure_stage_of(m.reason)
        return m

    with tempfile.TemporaryDirectory() as folder:
        search = open_search(spec, f"sqlite:///{folder}/replay.db")
        search.measure = lookup  # type: ignore[method-assign]
        search.tactics = tactics
        trace = Trace(search, record, scale)
        run(search, trace)
        reached = next(((n, s) for n, s, hv in trace.trace if hv >= target), (None, 0.0))
        final = trace.trace[-1][2] if trace.trace else 0.0
        return reached[0], reached[1], final, missing


def open_record(url: str, folder: str) -> Store:
    """The record, read from a copy when it is a SQLite file (so it is never upgraded)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        copy = Path(folder) / "record.db"
        shutil.copy(parsed.database, copy)
        url = f"sqlite:///{copy}"
    return Store(url, create=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--record", default="sqlite:///bench/results/toy64-grid.db")
    p.add_argument("--study", default="toy64-grid")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--samplers", default="tpe,gp,nsga2,random")
    p.add_argument("--variants", default="all,none", help=", ".join(VARIANTS))
    p.add_argument("--budget", type=float, default=0.2, help="fraction of the space")
    p.add_argument("--fraction", type=float, default=0.95)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = open_record(args.record, folder)
        row = store.study(args.study)
        if row is None:
            raise SystemExit(f"no study {args.study} in {args.record}")
        record = {r.key: Measurement.from_dict(r.payload) for r in store.measurements(args.study)}
        everything = candidates(store.measurements(args.study))
    recorded = StudySpec.from_dict(row.spec)
    front = pareto(everything)
    scale = Scale(front)
    full = hypervolume(everything, scale)
    size = len(recorded.space.validate(recorded.workload.device))
    budget = max(1, int(args.budget * size))
    print(
        f"record {args.study}: {len(record)} strategies measured ({size} in its space), "
        f"{len(everything)} feasible; exhaustive front: {', '.join(p.key for p in front)}"
    )
    print(f"budget: {budget} measured strategies ({args.budget:.0%} of the space); target "
          f"{args.fraction:.0%} of the exhaustive hypervolume\n")  # fmt: skip
    print(
        f"| sampler | tactics | measured strategies to reach {args.fraction:.0%} ({args.seeds} "
        "seeds) | median | worst | seeds within budget | median s measuring (reached) | "
        "HV at budget, median (worst) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for sampler in args.samplers.split(","):
        for variant in args.variants.split(","):
            needed, spent, finals, missing = [], [], [], set()
            for seed in range(args.seeds):
                data = recorded.to_dict()
                spec = StudySpec.from_dict({
                    **data, "sampler": sampler, "trials": budget,
                    "study": f"replay-{sampler}-{variant}-{seed}",
                    "settings": {**data["settings"], "seed": seed},
                })  # fmt: skip
                n, s, final, gone = replay(record, spec, VARIANTS[variant], scale,
                                           args.fraction * full)  # fmt: skip
                needed.append(n)
                spent.append(s)
                finals.append(final / full)
                missing |= gone
            shown = [str(n) if n is not None else f">{budget}" for n in needed]
            ranked = sorted(n if n is not None else budget + 1 for n in needed)
            median = statistics.median(ranked)
            worst = ranked[-1]
            reached = [s for s, n in zip(spent, needed, strict=True) if n]
            print(
                f"| {sampler} | {variant} | {', '.join(shown)} | "
                f"{median if median <= budget else f'>{budget}'} | "
                f"{worst if worst <= budget else f'>{budget}'} | "
                f"{sum(n is not None for n in needed)}/{len(needed)} | "
                f"{statistics.median(reached) if reached else 0:.0f}"
                f" | {statistics.median(finals):.1%} ({min(finals):.1%}) |",
                flush=True,
            )
            if missing:
                print(
                    f"  ({len(missing)} strategies of the space are not in the record, "
                    f"counted as unmeasurable: {', '.join(sorted(missing)[:5])} ...)"
                )


if __name__ == "__main__":
    main()
