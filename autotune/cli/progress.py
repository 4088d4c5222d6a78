"""The live progress bar of a search or a worker (a :class:`autotune.search.Listener`): trial n
of N, the time left, the current strategy and the best so far (read incrementally)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING

from autotune.choice.selection import choose
from autotune.errors import AutotuneError
from autotune.search.state import Lines

if TYPE_CHECKING:
    from typing import TextIO

    from autotune.search.plan import Plan
    from autotune.search.state import Search
    from autotune.storage import Store, Stored


def clock(seconds: float) -> str:
    """Seconds as ``m:ss``."""
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


class BestSoFar:
    """The pick of the study's policy among what is stored, reading only what is new each time."""

    def __init__(self, store: Store, study: str, policy: str, objectives: tuple[str, ...],
                 max_memory_mb: float | None = None) -> None:  # fmt: skip
        self.store, self.study, self.policy = store, study, policy
        self.objectives, self.max_memory_mb = objectives, max_memory_mb
        self.rows: list[Stored] = []

    def __call__(self) -> str:
        self.rows += self.store.measurements(
            self.study, after=self.rows[-1].id if self.rows else 0
        )
        try:
            best, _, _ = choose(self.rows, self.policy, self.objectives, self.max_memory_mb)
        except AutotuneError:
            return "—"
        return f"{best.key} ({best.compile_s:.1f} s, {best.latency_ms:.3g} ms)"


class Progress:
    """A live bar: trial n of N, elapsed time, the current strategy, the best so far; notes
    are written above it."""

    def __init__(self, total: int, initial: int, enabled: bool, best: BestSoFar | None = None,
                 plan: Plan | None = None) -> None:  # fmt: skip
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, initial=initial, disable=not enabled, unit="trial",
            bar_format="{n}/{total} trials |{bar:20}| {elapsed} {postfix}", dynamic_ncols=True,
        )  # fmt: skip
        self.best_so_far = best
        self.best = "—"
        self.plan = plan  # its time budget, shown as the time left
        self.stop = threading.Event()
        self.ticker = threading.Thread(target=self._tick, daemon=True)
        if enabled and sys.stderr.isatty():  # a live clock only where it redraws in place
            self.ticker.start()

    @classmethod
    def of(cls, search: Search, enabled: bool) -> Progress:
        """The bar of a search or a worker: its study's trials, the best so far under its
        policy, the time left against its plan's budget."""
        spec = search.spec
        best = BestSoFar(search.store, search.name, spec.policy, spec.objectives,
                         spec.max_memory_mb)  # fmt: skip
        return cls(search.target, len(search.measured()), enabled, best, search.plan)

    def _tick(self) -> None:
        while not self.stop.wait(1.0):
            self.bar.refresh()

    def left(self) -> str:
        """The time left against the budget, as `` | 6:12 of 10:00 left``."""
        plan = self.plan
        if plan is None or plan.deadline is None or plan.budget_s is None:
            return ""
        left = max(0.0, plan.deadline - time.time())
        return f" | {clock(left)} of {clock(plan.budget_s)} left"

    def now(self, what: str) -> None:
        self.bar.set_postfix_str(f"{what} | best {self.best}{self.left()}", refresh=True)

    def measured(self, key: str, done: int) -> None:
        if self.best_so_far is not None and not self.bar.disable:
            self.best = self.best_so_far()
        self.bar.set_postfix_str(f"last {key} | best {self.best}{self.left()}", refresh=False)
        self.bar.n = done
        self.bar.refresh()

    def note(self, line: str) -> None:
        self.bar.write(f"autotune: {line}", file=sys.stderr)

    def close(self) -> None:
        self.stop.set()
        self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Told(Lines):
    """A listener for after the bar: its notes as :class:`Lines` writes them, and what the
    search does now, one line each on ``out``."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def now(self, what: str) -> None:
        print(f"{what}…", file=self.out, flush=True)
