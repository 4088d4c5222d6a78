"""Search efficiency: replay the search against recorded exhaustive grids, held out.

Record a grid once (every canonical strategy of a space, measured for real), e.g.:

    autotune search --model bench/models/llama-small --sampler grid --trials 1000 --iters 10 \
        --starts cold --mode default,max-autotune-no-cudagraphs --options freezing,cpp_wrapper \
        --fullgraph false --no-progress --no-confirm --study llama-small-options-grid \
        --storage sqlite:///bench/results/llama-small-options-grid.db

then replay the search over 10 seeds through autotune's own loop (steering, de-duplication,
deduction and the surrogate included), each measurement looked up in the record instead of run.

    python bench/efficiency.py

replays every record ``bench/results/*-grid.db`` (the study named as the file) *held out*:
for each record, the tactics variant (``--choices``) that does best on the other records is
chosen, and only its result on this record is reported, beside the sampler alone (TPE and
random, no tactics). ``--record URL [--study NAME]`` reports one more record the same way,
chosen on all of the bench's. ``--samplers`` and ``--variants`` print instead one table per
record of every sampler with every variant (no choosing: for diagnosis). ``--trace RECORD
[--seed N] [--variants V]`` prints one replay's order on a record: each measured strategy in
turn (anchors and the exhaustive front's points marked, with the hypervolume found so far), then
each point of the exhaustive front with the step that found it, or its share of the exhaustive
hypervolume (what the front loses without it) where none did.

The space, workload and objectives come from the record's stored spec, so older and newer
records replay without code changes. A strategy of that space missing from the record counts as
unmeasurable (a failed trial, reported), never guessed.

Each replay has a fixed budget (``--budget``, default 20 % of the space, as a user's
``--trials``) and reports how many *measured* strategies it took to reach 95 % of the exhaustive
Pareto front's hypervolume (compile time vs latency, eager included; both objectives normalised
by the exhaustive front, reference point 1.1), or ``>B`` when the budget ran out first. Deduced
strategies cost nothing and are not counted. ``s`` is the measuring time spent until then (the
record's wall time of each measured strategy).

``--rungs`` asks instead whether cheap rungs (autotune/trial/rungs.py) find the front sooner:
per record and seed, the default search (the surrogate sampler, the default tactics) is
replayed without rungs for the budget, which gives its wall time W, then with rungs until W
is spent. A trial with rungs is its record: the rung's check runs on the record's first rounds
against the front the replay has stored so far, exactly as the child checks its own; a trial
that stops there is stored with those rounds alone, its wall time less the later rounds' share
of its timed seconds (each round's share by its recorded times: eager's call and the compiled
one). The table gives the front's hypervolume at 25/50/75/100 % of W, with and without.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import multiprocessing
import os
import shutil
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url

from autotune.choice.selection import Point, candidates, pareto
from autotune.search import Search, open_search, run, studies, surrogate
from autotune.search.deduction import Tactics
from autotune.search.spec import StudySpec
from autotune.storage import Store
from autotune.strategy import Strategy
from autotune.trial.measurement import Latency, Measurement
from autotune.trial.metrics import failure_stage_of
from autotune.trial.reference import Reference
from autotune.trial.rungs import Rung

NONE = Tactics(False, False, False, False, False, False)
VARIANTS = {  # name: tactics
    "default": Tactics(),
    "spread-0.5": Tactics(spread=0.5),  # the surrogate, sure of less change per factor
    "spread-1": Tactics(spread=1.0),
    "spread-2": Tactics(spread=2.0),  # ... of more
    "all": Tactics(True, True, True, True, True, True),
    "none": NONE,
    "old-default": Tactics(model=False),  # the tactics before the surrogate
    "model": Tactics(False, False, False, False, False, True),
    "anchors": Tactics(True, False, False, False, False, False),
    "implication": Tactics(False, True, False, False, False, False),
    "equivalence": Tactics(False, False, True, False, False, False),
    "exhaustive": Tactics(False, False, False, True, False, False),
    "cheap-first": Tactics(False, False, False, False, True, False),
    "all-but-cheap-first": Tactics(True, True, True, True, False, True),
    "all-but-equivalence": Tactics(True, True, False, True, True, True),
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
    """Area the points dominate (minimising both), scaled, inside the box up to ``ref``."""
    return surrogate.hypervolume([scale(p) for p in points], (ref, ref))


class Stop(Exception):
    """The replay's wall time is spent."""


Steps = list[tuple[int, float, float, str]]  # (measured, seconds, hypervolume, key) per trial


class Trace:
    """A search's listener that notes, after every measured strategy, how many are measured,
    the record's seconds spent measuring them (as stored: a cheap rung's are fewer), the
    hypervolume of what is stored, and the strategy; past ``limit_s`` seconds it stops the
    search."""

    def __init__(self, search: Search, scale: Scale, limit_s: float | None = None) -> None:
        self.search, self.scale, self.limit_s = search, scale, limit_s
        self.trace: Steps = []

    def now(self, what: str) -> None:
        pass

    def note(self, line: str) -> None:
        pass

    def measured(self, key: str, done: int) -> None:
        search = self.search
        measured = search.measured()
        rows = search.store.measurements(search.name)
        spent = sum(r.payload.get("wall_s") or 0.0 for r in rows
                    if r.key in measured and r.deduced_from is None)  # fmt: skip
        hv = hypervolume(candidates(rows), self.scale)
        self.trace.append((len(measured), spent, hv, key))
        if self.limit_s is not None and spent >= self.limit_s:
            raise Stop


def at_rung(m: Measurement, rung: Rung) -> Measurement:
    """What the trial recorded as ``m`` would have stored with a cheap ``rung``: ``m`` where it
    may reach the rung's front (its first rounds were the rung's) or its sign test decided
    first; else its first ``rung.rounds`` rounds alone, its timed seconds and wall time less the
    later rounds' share (each round's share by its recorded times, eager's and compiled)."""
    if not (m.ok and m.latency and m.eager_latency) or m.strategy.granularity == "none":
        return m
    eager, compiled, k = m.eager_latency.samples_ms, m.latency.samples_ms, rung.rounds
    if min(len(eager), len(compiled)) < k:  # the sign test decided before the rung's check
        return m
    memory = m.memory.compiled_peak_mb if m.memory else None
    why = rung.verdict(m.compile_s or 0.0, eager[:k], compiled[:k], memory)
    if not why:
        return dataclasses.replace(m, rung="full")
    rounds = [e + c for e, c in zip(eager, compiled, strict=False)]
    timed = m.timings.get("timing_s", 0.0)
    later = timed * sum(rounds[k:]) / sum(rounds)
    cheap = Measurement.from_dict(m.to_dict())
    cheap.latency = Latency.from_samples([c / 1e3 for c in compiled[:k]])
    cheap.eager_latency = Latency.from_samples([e / 1e3 for e in eager[:k]])
    cheap.speedup = cheap.eager_latency.median_ms / cheap.latency.median_ms
    cheap.rung, cheap.reason = "cheap", why
    cheap.timings = {**m.timings, "rounds": float(k), "timing_s": timed - later}
    cheap.wall_s = (m.wall_s or 0.0) - later
    return cheap


def traced(record: dict[str, Measurement], spec: StudySpec, tactics: Tactics, scale: Scale,
           limit_s: float | None = None) -> tuple[Steps, dict[str, Measurement], set[str]
                                                  ]:  # fmt: skip
    """autotune's own loop, with each measurement looked up in the record (through a cheap
    rung where ``spec.rungs`` says so, :func:`at_rung`), until its budget or ``limit_s``
    seconds of the record's trials: its trace, what it stored (measured, not deduced), and the
    strategies missing from the record."""
    missing: set[str] = set()

    def lookup(strategy: Strategy) -> Measurement:
        if strategy.key not in record:
            missing.add(strategy.key)
            return Measurement(strategy.to_dict(), {}, {}, "failed", reason="not in the record")
        m = record[strategy.key]
        if not m.ok and not m.stage:  # recorded before failures had a stage: read its reason
            m.stage = failure_stage_of(m.reason)
        rung = search.rung(spec.settings) if strategy.granularity != "none" else None
        return m if rung is None else at_rung(m, rung)

    with tempfile.TemporaryDirectory() as folder:
        search = open_search(spec, f"sqlite:///{folder}/replay.db")
        search.measure = lookup  # type: ignore[method-assign]
        search.reference = Reference.none("a replay measures nothing")
        search.tactics = tactics
        trace = Trace(search, scale, limit_s)
        with contextlib.suppress(Stop):
            run(search, trace)
        stored = {
            r.key: Measurement.from_dict(r.payload)
            for r in search.store.measurements(search.name)
            if r.deduced_from is None
        }
        return trace.trace, stored, missing


def replay(record: dict[str, Measurement], spec: StudySpec, tactics: Tactics, scale: Scale,
           target: float) -> tuple[int | None, float, float, set[str]]:  # fmt: skip
    """(measured strategies needed, seconds spent then, hypervolume at the budget, missing)."""
    trace, _, missing = traced(record, spec, tactics, scale)
    reached = next(((n, s) for n, s, hv, _ in trace if hv >= target), (None, 0.0))
    final = trace[-1][2] if trace else 0.0
    return reached[0], reached[1], final, missing


def open_record(url: str, folder: str) -> Store:
    """The record, read from a copy when it is a SQLite file (so it is never upgraded)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        copy = Path(folder) / "record.db"
        shutil.copy(parsed.database, copy)
        url = f"sqlite:///{copy}"
    return Store(url, create=False)


@dataclass
class Record:
    """An exhaustive record, loaded: every measurement by key, its spec and exhaustive front."""

    url: str
    name: str
    record: dict[str, Measurement]
    spec: StudySpec
    front: list[Point]
    scale: Scale
    full: float  # the exhaustive front's hypervolume
    size: int  # strategies in its space
    budget: int  # measured strategies a replay may spend
    eager: float  # the hypervolume of eager alone (a replay's before its first trial)
    points: list[Point]  # every feasible strategy of the record, eager included

    @classmethod
    def load(cls, url: str, study: str, budget: float) -> Record:
        with tempfile.TemporaryDirectory() as folder:
            store = open_record(url, folder)
            row = studies.study(store, study)
            if row is None:
                raise SystemExit(f"no study {study} in {url}")
            stored = store.measurements(study)
        record = {r.key: Measurement.from_dict(r.payload) for r in stored}
        everything = candidates(stored)
        spec = row.spec.check()
        front = pareto(everything)
        scale = Scale(front)
        size = len(spec.space.validate(spec.workload.device))
        eager = [p for p in everything if p.key == "none"]
        return cls(url, study, record, spec, front, scale, hypervolume(everything, scale), size,
                   max(1, int(budget * size)), hypervolume(eager, scale), everything)  # fmt: skip

    def spec_for(self, sampler: str, seed: int, rungs: str = "full",
                 trials: int | None = None) -> StudySpec:  # fmt: skip
        """The record's spec as one replay runs it."""
        spec = self.spec
        return dataclasses.replace(
            spec, sampler=sampler, trials=trials or self.budget, rungs=rungs,
            study=f"replay-{sampler}-{rungs}-{seed}",
            settings=dataclasses.replace(spec.settings, seed=seed),
        )  # fmt: skip

    def replays(self, sampler: str, variant: str, seeds: int, fraction: float) -> Replays:
        """``seeds`` replays of the search with ``sampler`` and the tactics ``variant``, every
        trial at full fidelity (as the records were measured)."""
        out = Replays(self.budget)
        for seed in range(seeds):
            spec = self.spec_for(sampler, seed)
            n, spent, final, gone = replay(self.record, spec, VARIANTS[variant], self.scale,
                                           fraction * self.full)  # fmt: skip
            out.needed.append(n)
            out.spent.append(spent)
            out.finals.append(final / self.full)
            out.missing |= gone
        return out


@dataclass
class Replays:
    """The outcome of one sampler and tactics over the seeds of one record."""

    budget: int
    needed: list[int | None] = field(default_factory=list)  # measured to reach the target
    spent: list[float] = field(default_factory=list)  # seconds measuring until then
    finals: list[float] = field(default_factory=list)  # hypervolume at the budget, a fraction
    missing: set[str] = field(default_factory=set)

    @property
    def reached(self) -> int:
        return sum(n is not None for n in self.needed)

    def score(self) -> tuple[float, float]:
        """What the held-out choice maximises, as the target reads: whether *every* seed
        reached it, then the worst seed's hypervolume at the budget."""
        return float(self.reached == len(self.needed)), min(self.finals)

    def counts(self) -> tuple[str, str, str]:
        """(each seed's count, median, worst), ``>B`` where the budget ran out first."""
        shown = [str(n) if n is not None else f">{self.budget}" for n in self.needed]
        ranked = sorted(n if n is not None else self.budget + 1 for n in self.needed)
        median, worst = statistics.median(ranked), ranked[-1]

        def cap(v: float) -> str:
            return f"{v:g}" if v <= self.budget else f">{self.budget}"

        return ", ".join(shown), cap(median), cap(worst)

    def hv(self) -> str:
        return f"{statistics.median(self.finals):.1%} ({min(self.finals):.1%})"


def table(rec: Record, samplers: list[str], variants: list[str], seeds: int, fraction: float
          ) -> None:  # fmt: skip
    """One record's table: every sampler with every tactics variant."""
    print(
        f"| sampler | tactics | measured strategies to reach {fraction:.0%} ({seeds} seeds) | "
        "median | worst | seeds within budget | median s measuring (reached) | "
        "HV at budget, median (worst) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for sampler in samplers:
        for variant in variants:
            r = rec.replays(sampler, variant, seeds, fraction)
            shown, median, worst = r.counts()
            spent = [s for s, n in zip(r.spent, r.needed, strict=True) if n]
            print(f"| {sampler} | {variant} | {shown} | {median} | {worst} | "
                  f"{r.reached}/{seeds} | {statistics.median(spent) if spent else 0:.0f} | "
                  f"{r.hv()} |", flush=True)  # fmt: skip
            if r.missing:
                print(
                    f"  ({len(r.missing)} strategies of the space are not in the record, "
                    f"counted as unmeasurable: {', '.join(sorted(r.missing)[:5])} ...)"
                )


def _replays(job: tuple[str, str, float, str, str, int, float]) -> Replays:
    """One (record, sampler, variant)'s replays, in a process of its own."""
    url, study, budget, sampler, variant, seeds, fraction = job
    return Record.load(url, study, budget).replays(sampler, variant, seeds, fraction)


def best(choices: list[str], train: list[Record], done: dict[tuple[str, str, str], Replays]
         ) -> str:  # fmt: skip
    """The variant that does best on ``train``: the most records where every seed reached the
    target, then the best mean of each record's worst hypervolume."""

    def score(variant: str) -> tuple[float, float]:
        scores = [done[r.name, variant, "tpe"].score() for r in train]
        return tuple(statistics.mean(s[i] for s in scores) for i in (0, 1))  # type: ignore

    return max(choices, key=score) if train else choices[0]


def held_out(
    records: list[Record], targets: list[Record], choices: list[str], seeds: int,
    fraction: float, budget: float, jobs: int,
) -> None:  # fmt: skip
    """Leave one out: for each target, the tactics variant that does best on the *other*
    records is chosen, and only its result on the target is reported, beside the samplers
    alone (TPE and random with no tactics). The replays run ``jobs`` at a time."""
    every = {r.name: r for r in records + targets}
    wanted = {(r, v, "tpe") for r in every for v in choices}
    wanted |= {(t.name, "none", sampler) for t in targets for sampler in ("tpe", "random")}
    order = sorted(wanted)
    work = [(every[r].url, r, budget, sampler, v, seeds, fraction) for r, v, sampler in order]
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = dict(zip(order, pool.map(_replays, work), strict=True))

    print(f"| record (held out) | budget | tactics chosen on the others | seeds reaching "
          f"{fraction:.0%} within budget | measured strategies to reach it: median (worst) | "
          "HV at budget: median (worst) | TPE alone: seeds, HV median (worst) | "
          "random alone: seeds, HV median (worst) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for target in targets:
        train = [r for r in records if r.name != target.name]

        chosen = best(choices, train, done)
        got = done[target.name, chosen, "tpe"]
        _, median, worst = got.counts()
        alone = [done[target.name, "none", sampler] for sampler in ("tpe", "random")]
        print(f"| {target.name} | {target.budget} of {target.size} | {chosen} | "
              f"{got.reached}/{seeds} | {median} ({worst}) | {got.hv()} | "
              + " | ".join(f"{a.reached}/{seeds}, {a.hv()}" for a in alone) + " |",
              flush=True)  # fmt: skip
    print("\nEach variant on each record (what the choices were made from; a record's own row "
          "never chose its variant):\n")  # fmt: skip
    print("| record | " + " | ".join(choices) + " |")
    print("| --- |" + " --- |" * len(choices))
    for rec in every.values():
        cells = [f"{done[rec.name, v, 'tpe'].reached}/{seeds}, {done[rec.name, v, 'tpe'].hv()}"
                 for v in choices]  # fmt: skip
        print(f"| {rec.name} | " + " | ".join(cells) + " |")
    print(f"\nchosen on all {len(records)} records: {best(choices, records, done)} (what "
          "autotune's default should be)")  # fmt: skip


FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of the wall time W of the replay without rungs


def _paired(job: tuple[str, str, float, int]) -> dict:
    """One record's seed: the default search without rungs for the budget (its wall time W),
    then with rungs until W is spent (twice the budget in trials, so that the budget does not
    end it first; a budget that covers the space would change the tactics)."""
    url, study, budget, seed = job
    rec = Record.load(url, study, budget)
    without, _, _ = traced(rec.record, rec.spec_for("surrogate", seed), Tactics(), rec.scale)
    wall = without[-1][1] if without else 0.0
    spec = rec.spec_for("surrogate", seed, "cheap", 2 * rec.budget)
    with_, stored, _ = traced(rec.record, spec, Tactics(), rec.scale, wall)
    cheap = [k for k, m in stored.items() if m.cheap]
    saved = sum((rec.record[k].wall_s or 0.0) - (stored[k].wall_s or 0.0) for k in cheap)
    on_front = {p.key for p in rec.front}
    return {"record": study, "wall": wall, "without": without, "with": with_, "cheap": cheap,
            "saved": saved,
            "front_cheap": [k for k in cheap if k in on_front],
            "ended": "wall" if with_ and with_[-1][1] >= wall else "budget"}  # fmt: skip


def hv_at(steps: Steps, seconds: float, eager: float) -> float:
    """The hypervolume stored once ``seconds`` of trials were spent (eager's before any)."""
    return next((hv for _, s, hv, _ in reversed(steps) if s <= seconds + 1e-9), eager)


def n_at(steps: Steps, seconds: float) -> int:
    """The trials measured once ``seconds`` of trials were spent."""
    return next((n for n, s, _, _ in reversed(steps) if s <= seconds + 1e-9), 0)


def rounds_share(rec: Record) -> float:
    """The median share of a compiled trial's wall time that its timed rounds took."""
    shares = [m.timings.get("timing_s", 0.0) / m.wall_s for m in rec.record.values()
              if m.ok and m.wall_s and m.strategy.granularity != "none"]  # fmt: skip
    return statistics.median(shares) if shares else 0.0


def rungs_table(records: list[Record], seeds: int, jobs: int) -> None:
    """Per record, the front's hypervolume at equal wall time with cheap rungs and without."""
    work = [(r.url, r.name, r.budget / r.size, seed) for r in records for seed in range(seeds)]
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = list(pool.map(_paired, work))
    print(f"HV at a share of W, the wall time of the replay without rungs (its budget's trials, "
          f"the record's seconds): median without / with rungs over {seeds} seeds, and the "
          "seeds where rungs did as well or better; then trials measured by W (median), "
          "trials stopped at the cheap rung and the seconds that saved (median), and those "
          "of the exhaustive front (every seed)\n")  # fmt: skip
    print(
        "| record | rounds' share of a trial | W (median) | "
        + " | ".join(f"HV at {f:.0%} of W" for f in FRACTIONS)
        + " | measured by W: without, with | stopped cheap, saving | of the front, stopped |"
    )
    print("| --- |" + " --- |" * (6 + len(FRACTIONS)))
    tally = [0, 0]
    for rec in records:
        runs = [d for d in done if d["record"] == rec.name]
        cells = []
        for f in FRACTIONS:
            pairs = [
                (
                    hv_at(d["without"], f * d["wall"], rec.eager) / rec.full,
                    hv_at(d["with"], f * d["wall"], rec.eager) / rec.full,
                )
                for d in runs
            ]
            good = sum(w >= o - 1e-9 for o, w in pairs)
            tally[0], tally[1] = tally[0] + good, tally[1] + len(pairs)
            cells.append(
                f"{statistics.median(o for o, _ in pairs):.1%} / "
                f"{statistics.median(w for _, w in pairs):.1%} ({good}/{len(pairs)})"
            )
        measured = [statistics.median(n_at(d[side], d["wall"]) for d in runs)
                    for side in ("without", "with")]  # fmt: skip
        stopped = statistics.median(len(d["cheap"]) for d in runs)
        saved = statistics.median(d["saved"] for d in runs)
        front = sorted({k for d in runs for k in d["front_cheap"]})
        ended = sum(d["ended"] == "budget" for d in runs)
        print(f"| {rec.name} | {rounds_share(rec):.1%} | "
              f"{statistics.median(d['wall'] for d in runs):.0f} s | " + " | ".join(cells)
              + f" | {measured[0]:g}, {measured[1]:g} | {stopped:g}, {saved:.1f} s | "
              f"{sum(len(d['front_cheap']) for d in runs)} ({', '.join(front) or 'none'}) |"
              + (f" (with rungs, {ended} seeds ended at their trial budget before W)"
                 if ended else ""), flush=True)  # fmt: skip
    print(f"\nrungs did as well or better in {tally[0]} of {tally[1]} (record, seed, share of W)")


def show_trace(rec: Record, variant: str, seed: int, fraction: float) -> None:
    """One replay's order: one line per measured strategy (anchors and the exhaustive front's
    points marked, with the front's hypervolume then), then each front point's step, or its
    share of the exhaustive hypervolume (what the front loses without it) if never found."""
    from autotune.search.deduction import anchors

    steps, _, missing = traced(rec.record, rec.spec_for("tpe", seed), VARIANTS[variant],
                               rec.scale)  # fmt: skip
    front = {p.key: p for p in rec.front}
    members = rec.spec.space.validate(rec.spec.workload.device)
    firsts = {a.key for a in anchors(members, members)}
    points = {p.key: p for p in rec.points}
    print(
        f"{rec.name}, seed {seed}, tactics {variant}: {steps[-1][0] if steps else 1} measured "
        f"of a budget of {rec.budget}, eager (the baseline, measured first) included\n"
    )
    print("| step | strategy | compile s | latency ms | HV | marks |")
    print("| --- | --- | --- | --- | --- | --- |")
    found: dict[str, int] = {}
    reached = False
    for n, _, hv, key in [(1, 0.0, rec.eager, "none"), *steps]:
        p = points.get(key)
        marks = [m for m, on in (("anchor", key in firsts), ("FRONT", key in front)) if on]
        if key in front:
            found.setdefault(key, n)
        if not reached and hv >= fraction * rec.full:
            reached = True
            marks.append(f"reaches {fraction:.0%}")
        shown = f"{p.compile_s:.2f} | {p.latency_ms:.3f}" if p else "failed | -"
        print(f"| {n} | {key} | {shown} | {hv / rec.full:.1%} | {', '.join(marks)} |")
    print("\nthe exhaustive front, by compile time:")
    for key, p in front.items():
        rest = [q for q in rec.front if q.key != key]
        share = 1 - hypervolume(rest, rec.scale) / rec.full
        where = f"found at step {found[key]}" if key in found else "NEVER FOUND"
        print(
            f"  {key}: {p.compile_s:.2f} s, {p.latency_ms:.3f} ms, {share:.1%} of the HV "
            f"alone: {where}"
        )
    if missing:
        print(f"({len(missing)} strategies not in the record, counted as failed)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--record", help="a record's storage URL (default: every bench record)")
    p.add_argument("--study", help="the record's study name (default: the file's name)")
    p.add_argument("--results", default="bench/results", help="where the records *-grid.db are")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--samplers", help="one table per record: these samplers ...")
    p.add_argument("--variants", help="... with these tactics: " + ", ".join(VARIANTS))
    p.add_argument(
        "--choices",
        default="spread-0.5,spread-1,spread-2,old-default",
        help="held out: the tactics variants the other records choose among",
    )
    p.add_argument("--budget", type=float, default=0.2, help="fraction of the space")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="replays at a time")
    p.add_argument("--fraction", type=float, default=0.95)
    p.add_argument("--rungs", action="store_true", help="with and without cheap rungs instead")
    p.add_argument(
        "--trace",
        metavar="RECORD",
        help="one replay's order on a record (a study "
        "name of the bench's, or --record's), one line per measured strategy",
    )
    p.add_argument("--seed", type=int, default=0, help="--trace: the replay's seed")
    args = p.parse_args()
    bench = [Record.load(f"sqlite:///{path}", path.stem, args.budget)
             for path in sorted(Path(args.results).glob("*-grid.db"))]  # fmt: skip
    targets = bench
    if args.record:
        study = args.study or Path(make_url(args.record).database or "").stem
        targets = [Record.load(args.record, study, args.budget)]
    for rec in targets:
        print(f"record {rec.name}: {len(rec.record)} strategies measured ({rec.size} in its "
              f"space); exhaustive front: {', '.join(p.key for p in rec.front)}")  # fmt: skip
    print(f"budget: {args.budget:.0%} of each space; target {args.fraction:.0%} of the "
          "exhaustive hypervolume\n")  # fmt: skip
    if args.trace:
        chosen = [r for r in targets + bench if r.name == args.trace][:1]
        if not chosen:
            raise SystemExit(f"no record {args.trace} among {', '.join(r.name for r in bench)}")
        show_trace(chosen[0], (args.variants or "default").split(",")[0], args.seed,
                   args.fraction)  # fmt: skip
        return
    if args.rungs:
        rungs_table(targets, args.seeds, args.jobs)
        return
    if args.samplers or args.variants:
        for rec in targets:
            print(f"\n{rec.name}: {rec.budget} measured strategies\n")
            samplers, variants = args.samplers or "tpe", args.variants or "default"
            table(rec, samplers.split(","), variants.split(","), args.seeds, args.fraction)
        return
    held_out(bench, targets, args.choices.split(","), args.seeds, args.fraction, args.budget,
             args.jobs)  # fmt: skip


if __name__ == "__main__":
    main()
