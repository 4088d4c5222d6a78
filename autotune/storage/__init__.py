"""Storage: the one boundary between autotune and its database.

- :mod:`.urls`: which database, and its URL as it may be shown (password masked);
- :mod:`.retry`: what a running search waits out (a lost connection) and what it does not;
- :mod:`.schema`: autotune's tables and their migrations;
- :mod:`.records`: the plain records the store hands out (no ORM row leaves this package),
  a study's spec among them as stored (:class:`StoredStudy`: the search reads it typed);
- :mod:`.store`: the data access; :mod:`.ledger`: one transaction on a study's claims and
  measurements, for :mod:`autotune.coordination`.

Optuna's own tables sit in the same database, reached through Optuna's public ``RDBStorage``
(:func:`optuna_storage`).
"""

from __future__ import annotations

from autotune.storage.records import (
    Claim,
    ExportRecord,
    RunRecord,
    Stored,
    StoredStudy,
)
from autotune.storage.retry import resilient, retrying, transient
from autotune.storage.schema import SCHEMA_VERSION
from autotune.storage.store import Store
from autotune.storage.urls import DEFAULT_URL, mask, resolve_url, scrub

__all__ = [
    "DEFAULT_URL",
    "SCHEMA_VERSION",
    "Claim",
    "ExportRecord",
    "RunRecord",
    "Store",
    "Stored",
    "StoredStudy",
    "mask",
    "optuna_storage",
    "resilient",
    "resolve_url",
    "retrying",
    "scrub",
    "transient",
]


def optuna_storage(url: str) -> object:
    """Optuna's public RDB storage on the study database (SQLite waits for its write lock)."""
    import optuna

    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
