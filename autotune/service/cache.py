"""What the service computed from the storage, kept until the storage changes.

Every request reads the storage's stamp (one small query: row counts and latest ids, see
:meth:`autotune.storage.Store.stamp`); what was computed under the same stamp is served again,
so a page or a lookup is always what the store holds at that moment. Of many requests for the
same thing after a change, one computes it and the others wait for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from autotune.storage import Store

T = TypeVar("T")
MAX_ENTRIES = 512


class Cache:
    """Values keyed by what was asked, valid for one stamp of the storage."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.stamp: tuple[int, ...] | None = None
        self.values: dict[Hashable, Any] = {}
        self.busy: dict[tuple[Any, Hashable], threading.Lock] = {}

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The value for ``key`` under the storage's current stamp, computed at most once."""
        stamp = self.store.stamp()
        with self.lock:
            if stamp != self.stamp:
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
