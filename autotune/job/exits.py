"""How an autotune process runs its command and ends, the ``autotune`` command's and a spawned
worker's alike: an ``AutotuneError`` as one line on stderr and its exit code (a traceback only
with ``debug``), Ctrl-C or SIGTERM as ``interrupted`` and 130, a database error as one line
with the URL's password masked, and autotune's warnings as one line each."""

from __future__ import annotations

import signal
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

from autotune.errors import AutotuneError, AutotuneWarning


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _one_line(message: Any, category: type, filename: str, lineno: int, file: Any = None,
              line: str | None = None) -> None:  # fmt: skip
    """autotune's warnings as one line on stderr, as its errors are; others as Python shows
    them."""
    if issubclass(category, AutotuneWarning):
        print(f"autotune: {message}", file=sys.stderr, flush=True)
    else:
        _show(message, category, filename, lineno, file, line)


_show = warnings.showwarning


def guarded(command: Callable[[], int], *, debug: bool = False, storage: str | None = None) -> int:
    """Run ``command`` and return its exit code, or the exit code of what stopped it (said in
    one line); ``storage`` is the URL a database error is reported against."""
    warnings.showwarning = _one_line
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # a scheduler's kill stops as cleanly as Ctrl-C
    try:
        return command()
    except AutotuneError as exc:
        if debug:
            raise
        print(f"autotune: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        print("autotune: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a database error that reached here (Optuna's own calls)
        from autotune.storage import mask, resolve_url, scrub
        from autotune.storage.retry import database_error, final_reason

        found = database_error(exc)
        if found is None or debug:
            raise
        url = resolve_url(storage)
        text = (str(getattr(found, "orig", None) or found).strip().splitlines() or [""])[0]
        why = final_reason(found) or "the database failed"
        print(f"autotune: error: storage {mask(url)}: {why} ({scrub(text, url)})", file=sys.stderr)
        return 2
