"""Retry: a running search outlasts a database restart or a network drop, and fails at once
on anything else (a wrong query, a full disk, a read-only file)."""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError

from autotune.errors import StorageError
from autotune.storage.urls import mask
from autotune.variables import db_retry_s

T = TypeVar("T")
# the database answered, and what it said will not change on a retry
_FINAL = ("disk is full", "database or disk is full", "readonly database", "read-only",
          "no space left", "disk full", "permission denied")  # fmt: skip


def final_reason(exc: BaseException) -> str | None:
    """A database error that no retry mends (disk full, read-only), in a few words."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    if "full" in text or "no space" in text:
        return "the disk is full"
    if "readonly" in text or "read-only" in text or "permission denied" in text:
        return "it is read-only"
    return None


def transient(exc: BaseException) -> bool:
    """A lost connection (a restart, a network drop), as opposed to a wrong query or URL."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, StorageError):
            return seen.transient
        if isinstance(seen, (OperationalError, InterfaceError)) or getattr(
            seen, "connection_invalidated", False
        ):
            return final_reason(seen) is None
        seen = seen.__cause__ or seen.__context__
    return False


def database_error(exc: BaseException) -> BaseException | None:
    """The database's own error behind ``exc`` (SQLAlchemy's, as Optuna wraps it), if any."""
    from sqlalchemy.exc import SQLAlchemyError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, SQLAlchemyError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def retrying(fn: Callable[[], T], what: str, url: str) -> T:
    """Run ``fn``, retrying with back-off while the database cannot be reached
    (:func:`autotune.variables.db_retry_s`). A database error no retry mends (a full disk, a
    read-only file) is one ``StorageError`` line at once."""
    from autotune.storage.urls import scrub

    delay, deadline = 0.5, time.monotonic() + db_retry_s()
    while True:
        try:
            return fn()
        except Exception as exc:
            if not transient(exc) or time.monotonic() > deadline:
                found = database_error(exc)
                if found is None or isinstance(exc, StorageError):
                    raise
                why = final_reason(found) or "the database failed"
                text = str(getattr(found, "orig", None) or found).strip().splitlines()
                detail = scrub(text[0] if text else type(found).__name__, url)
                raise StorageError(
                    f"storage {mask(url)}: {why} during {what} ({detail})"
                ) from None
            print(f"autotune: storage {mask(url)} unreachable during {what}; retrying in "
                  f"{delay:g} s", file=sys.stderr, flush=True)  # fmt: skip
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


class Retrying(Protocol):
    """What :func:`resilient` needs of its object: the one flag, and the URL to name."""

    @property
    def retry(self) -> bool: ...

    @property
    def url(self) -> str: ...


def resilient(method: Callable[..., T]) -> Callable[..., T]:
    """A method that, once its object's ``retry`` is set, outlasts lost connections."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> T:
        if not self.retry:
            return method(self, *args, **kwargs)
        return retrying(lambda: method(self, *args, **kwargs), method.__name__, self.url)

    return wrapper
