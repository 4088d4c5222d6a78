"""What the service computed from the storage, kept until the storage changes.

The storage's stamp (one small query: row counts and latest ids, see
:meth:`autotune.storage.Store.stamp`) is read at most every ``FRESH_S``, by one request while
the others go on; what was computed under the same stamp is served again, so a page or a lookup
is what the store held a fraction of a second ago (the service's own writes are seen at once).
Of many requests for the same thing after a change, one computes it; the others wait for it,
or (:meth:`Cache.peek`, the lookup) are answered meanwhile with the value from before the
change, without a thread or a query.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from autotune.storage import Store

T = TypeVar("T")
MAX_ENTRIES = 512
FRESH_S = 0.2  # how stale an answer may be: under load, one stamp query serves many requests
MISSING = object()


class Cache:
    """Values keyed by what was asked, valid for one stamp of the storage."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.reading = threading.Lock()  # one request reads the stamp; the others go on
        self.stamp: tuple[int, ...] | None = None
        self.values: dict[Hashable, Any] = {}
        self.previous: dict[Hashable, Any] = {}  # under the stamp before: served while recomputed
        self.busy: dict[tuple[Any, Hashable], threading.Lock] = {}
        self.checked = float("-inf")  # when the stamp was last read

    def peek(self, key: Hashable) -> Any:
        """The value for ``key`` if the stamp was read within ``FRESH_S`` (or is being read),
        or the one before while it is being recomputed; else ``MISSING``. No query, no lock:
        for the event loop itself."""
        if time.monotonic() - self.checked >= FRESH_S and not self.reading.locked():
            return MISSING
        value = self.values.get(key, MISSING)
        if value is MISSING and (self.stamp, key) in self.busy:
            value = self.previous.get(key, MISSING)
        return value

    def changed(self) -> None:
        """The service wrote to the storage: the next request reads the stamp."""
        self.checked = float("-inf")

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The value for ``key`` under the storage's current stamp, computed at most once."""
        stamp = self._stamp()
        with self.lock:
            if stamp != self.stamp:
                self.previous = self.values or self.previous
                self.stamp, self.values, self.busy = stamp, {}, {}
            if key in self.values:
                return self.values[key]
            gate = self.busy.setdefault((stamp, key), threading.Lock())
        with gate:
            with self.lock:
                if self.stamp == stamp and key in self.values:
                    return self.values[key]
            value = compute()
            with self.lock:
                if self.stamp == stamp and len(self.values) < MAX_ENTRIES:
                    self.values[key] = value
                self.busy.pop((stamp, key), None)
        return value

    def _stamp(self) -> tuple[int, ...]:
        """The stamp: read at most every ``FRESH_S``, by one request at a time."""
        if self.stamp is not None and time.monotonic() - self.checked < FRESH_S:
            return self.stamp
        if not self.reading.acquire(blocking=False):
            if self.stamp is not None:  # another request is reading it
                return self.stamp
            self.reading.acquire()
        try:
            stamp = self.store.stamp()
            self.checked = time.monotonic()
            return stamp
        finally:
            self.reading.release()
