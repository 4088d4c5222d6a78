"""What a study shows: the live progress bar of a search, and the listing of every study in a
storage with its progress."""

from __future__ import annotations

import sys
import threading
from typing import Any

from autotune.coordination import Coordinator
from autotune.store import Store


class Progress:
    """A live bar: trial n of N, elapsed time, the current strategy, the best so far."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, initial=initial, disable=not enabled, unit="trial",
            bar_format="{n}/{total} trials |{bar:20}| {elapsed} {postfix}", dynamic_ncols=True,
        )  # fmt: skip
        self.best = "—"
        self.stop = threading.Event()
        self.ticker = threading.Thread(target=self._tick, daemon=True)
        if enabled and sys.stderr.isatty():  # a live clock only where it redraws in place
            self.ticker.start()

    def _tick(self) -> None:
        while not self.stop.wait(1.0):
            self.bar.refresh()

    def now(self, what: str) -> None:
        self.bar.set_postfix_str(f"{what} | best {self.best}", refresh=True)

    def advance(self, done: int, key: str, best: str) -> None:
        self.best = best
        self.bar.set_postfix_str(f"last {key} | best {best}", refresh=False)
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        self.stop.set()
        self.bar.close()


def overview(store: Store) -> list[dict[str, Any]]:
    """Every study in the storage with its progress: measured strategies against the budget,
    and those deduced without measuring."""
    rows = []
    for study in store.studies():
        found = store.measurements(study.name)
        measured = [m for m in found if m.deduced_from is None]  # what the budget counts
        statuses = [m.status for m in measured]
        last = max((m.created_at for m in found), default=study.created_at)
        rows.append({
            "study": study.name,
            "model": (study.spec.get("model") or {}).get("name"),
            "measured": len(measured),
            "deduced": len(found) - len(measured),
            "budget": study.spec.get("trials"),
            "ok": statuses.count("ok"),
            "failed": len(statuses) - statuses.count("ok"),
            "runs": len(store.runs(study.name)),
            "live workers": Coordinator(store, study.name, "").live_workers(),
            "last": last.isoformat(timespec="seconds") if last else "",
        })  # fmt: skip
    return rows
