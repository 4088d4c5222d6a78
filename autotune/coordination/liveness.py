"""Liveness: a worker's heartbeat, and how long the database has answered it in a row."""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

HEARTBEAT_S = float(os.environ.get("AUTOTUNE_HEARTBEAT_S", "5"))
GRACE_S = float(os.environ.get("AUTOTUNE_GRACE_S", "30"))
REAP_S = max(HEARTBEAT_S, GRACE_S / 3)  # how often a worker looks for dead workers' trials


class Beating(Protocol):
    def beat(self) -> int: ...


class Pulse:
    """A thread that beats this worker's claims every ``HEARTBEAT_S`` and knows for how long
    the database has answered in a row."""

    def __init__(self, coordinator: Beating) -> None:
        self.coordinator = coordinator
        self.since: float | None = time.monotonic()  # reached the database (at start-up)
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def steady(self) -> bool:
        """Has this worker reached the database for ``GRACE_S`` in a row?"""
        return self.since is not None and time.monotonic() - self.since >= GRACE_S

    def _run(self) -> None:
        while not self.stop_event.wait(HEARTBEAT_S):
            self.beat()

    def beat(self) -> None:
        try:
            self.coordinator.beat()
        except Exception:  # cut off: the reaper waits GRACE_S after the database is back
            self.since = None
            return
        if self.since is None:
            self.since = time.monotonic()

    def __enter__(self) -> Pulse:
        if self.thread is None:
            self.stop_event.clear()
            self.thread = threading.Thread(target=self._run, daemon=True, name="autotune-pulse")
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join()
            self.thread = None
