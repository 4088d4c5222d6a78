"""Liveness: a worker's heartbeat, and how long the database has answered it in a row."""

from __future__ import annotations

import threading
import time
from typing import Protocol

from autotune.variables import grace_s, heartbeat_s, reap_s

__all__ = ["Pulse", "grace_s", "heartbeat_s", "reap_s"]


class Beating(Protocol):
    def beat(self) -> int: ...


class Pulse:
    """A thread that beats this worker's claims every :func:`heartbeat_s` and knows for how long
    the database has answered in a row."""

    def __init__(self, coordinator: Beating) -> None:
        self.coordinator = coordinator
        self.since: float | None = time.monotonic()  # reached the database (at start-up)
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def steady(self) -> bool:
        """Has this worker reached the database for ``$AUTOTUNE_GRACE_S`` in a row
        (:func:`grace_s`, 30 s by default)?"""
        return self.since is not None and time.monotonic() - self.since >= grace_s()

    def _run(self) -> None:
        while not self.stop_event.wait(heartbeat_s()):
            self.beat()

    def beat(self) -> None:
        try:
            self.coordinator.beat()
        except Exception:  # cut off: the reaper waits $AUTOTUNE_GRACE_S after the database is back
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
