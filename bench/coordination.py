"""Coordination cost of many workers on one study in PostgreSQL, per measured strategy.

    python bench/coordination.py [--storage postgresql://...] [--workers 1,4,8] [--pad 30]

Without --storage it starts a throw-away PostgreSQL server (Debian's binaries, as the tests
do). For each worker count it creates a study from the recorded toy-64 grid
(bench/results/toy64-grid.db) with ``--per-worker`` strategies per worker, and runs that many
worker processes on it. Each measurement is looked up in the record and padded with a sleep of
``--pad`` seconds that stands in for a trial, so what is left is coordination: each worker's
wall time outside its measurements and outside idle waits for other workers (the database,
Optuna's sampler and SQLAlchemy in Python), summed over workers and divided by the strategies
measured. Beside it: Optuna steps (asked trials) per measured strategy, and the time inside the
PostgreSQL driver. Targets: <= 2 % of the trial's wall time at 8 workers, and <= 1.5 steps per
measured strategy. The same script runs against an older checkout, for the old figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RECORD = f"sqlite:///{ROOT}/bench/results/toy64-grid.db"


class DatabaseClock:
    """Wall time and round trips inside the PostgreSQL driver: every statement (with the BEGIN
    that psycopg sends before a transaction's first one), commit and rollback (the pool's
    rollback of an idle connection sends nothing, so it is not counted)."""

    def __init__(self) -> None:
        import psycopg

        self.seconds, self.calls = 0.0, 0
        for cls, names in ((psycopg.Cursor, ("execute", "executemany")),
                           (psycopg.Connection, ("commit", "rollback"))):  # fmt: skip
            for name in names:
                setattr(cls, name, self._timed(getattr(cls, name)))

    def _timed(self, call):  # type: ignore[no-untyped-def]
        def timed(owner, *args, **kwargs):  # type: ignore[no-untyped-def]
            connection = getattr(owner, "connection", owner)
            idle = connection.pgconn.transaction_status == 0  # a no-op: psycopg sends nothing
            start = time.perf_counter()
            try:
                return call(owner, *args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += not (idle and call.__name__ == "rollback")

        return timed


def worker(url: str, study: str, pad_s: float, out: multiprocessing.Queue) -> None:
    from autotune.search import join, loop, step
    from autotune.storage import Store
    from autotune.trial.measurement import Measurement

    record = {r.key: Measurement.from_dict(r.payload) for r in Store(RECORD).measurements(
        "toy64-grid")}  # fmt: skip
    sleep = time.sleep
    waited = [0.0]

    def idle(seconds: float) -> None:  # the loop's waits for other workers' trials
        waited[0] += seconds
        sleep(seconds)

    loop.time.sleep = idle  # type: ignore[assignment]
    search = join(study, url, force=True)
    inside = [0.0]

    def measure(strategy):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        sleep(pad_s)
        m = record[strategy.key]
        inside[0] += time.perf_counter() - start
        return m

    search.measure = measure  # type: ignore[method-assign]
    steps = [0]
    original = step.step

    def counted(*args):  # type: ignore[no-untyped-def]
        steps[0] += 1
        return original(*args)

    step.step = counted  # type: ignore[assignment]
    clock = DatabaseClock()
    start = time.perf_counter()
    outcome = loop.run(search)
    total = time.perf_counter() - start
    out.put({"steps": steps[0], "measured": outcome.measured_here, "repeats": outcome.repeats,
             "coordination_s": total - inside[0] - waited[0], "db_s": clock.seconds,
             "calls": clock.calls})  # fmt: skip


def run(url: str, count: int, trials: int, pad_s: float, sampler: str) -> None:
    from autotune.search import studies, submit
    from autotune.storage import Store

    record = studies.study(Store(RECORD), "toy64-grid")
    assert record is not None
    spec = dataclasses.replace(record.spec.check(), trials=trials, sampler=sampler,
                               study=f"coord-{sampler}-{count}-{os.getpid()}")  # fmt: skip
    name = submit(spec, url)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(url, name, pad_s, out)) for _ in range(count)]
    for p in procs:
        p.start()
    results = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    measured = len(Store(url).measured_keys(name))  # rows in the database, not worker claims
    total = {k: sum(r[k] for r in results) for k in results[0]}
    coordination = total["coordination_s"] / measured
    row = (f"| {sampler} | {count} | {measured} | {total['steps']} | "
           f"{total['steps'] / measured:.2f} | {coordination * 1e3:.0f} ms | "
           f"{100 * coordination / pad_s:.2f} % | {total['db_s'] / measured * 1e3:.0f} ms | "
           f"{total['calls'] / measured:.0f} |")  # fmt: skip
    print(row, flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--storage")
    p.add_argument("--workers", default="1,4,8")
    p.add_argument("--per-worker", type=int, default=4, help="strategies per worker")
    p.add_argument("--samplers", default="tpe,random")
    p.add_argument("--pad", type=float, default=30.0, help="seconds standing in for a trial")
    args = p.parse_args()
    server = None
    url = args.storage
    if url is None:
        from tests import postgres

        server = postgres.start()
        url = server.url
    try:
        print("| sampler | workers | strategies measured | Optuna steps | steps per measured "
              "strategy | coordination per measured strategy | share of a trial's wall time | "
              "database time per measured strategy | round trips per measured strategy |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")  # fmt: skip
        for sampler in args.samplers.split(","):
            for count in (int(c) for c in args.workers.split(",")):
                run(url, count, count * args.per_worker, args.pad, sampler)
    finally:
        if server is not None:
            postgres.stop(server)


if __name__ == "__main__":
    main()
