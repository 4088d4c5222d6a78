"""The ``autotune`` command. Heavy modules are imported inside each command, so --help is instant.

User errors (``AutotuneError``) end in one line on stderr and a non-zero exit; a traceback
only with ``--debug``. The parser is in :mod:`autotune.cli.parser`; the commands in
:mod:`autotune.cli.search` (measure, search), :mod:`autotune.cli.serve` (serve, and the queue
worker) and :mod:`autotune.cli.study` (the rest).
"""

from __future__ import annotations

import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import Any

from autotune.cli.parser import build_parser, model_and_workload
from autotune.cli.search import cmd_measure, cmd_search
from autotune.cli.serve import cmd_queue_worker, cmd_serve
from autotune.cli.study import (
    cmd_check,
    cmd_dashboard,
    cmd_export,
    cmd_models,
    cmd_show,
    cmd_studies,
    cmd_submit,
    cmd_worker,
)
from autotune.errors import AutotuneError, AutotuneWarning

__all__ = ["COMMANDS", "build_parser", "main", "model_and_workload"]

COMMANDS = {
    "models": cmd_models, "measure": cmd_measure, "search": cmd_search, "export": cmd_export,
    "dashboard": cmd_dashboard, "studies": cmd_studies, "submit": cmd_submit, "show": cmd_show,
    "worker": cmd_worker, "queue-worker": cmd_queue_worker, "serve": cmd_serve,
    "check": cmd_check,
}  # fmt: skip


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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _one_line
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # a scheduler's kill stops as cleanly as Ctrl-C
    try:
        return COMMANDS[args.command](args)
    except AutotuneError as exc:
        if args.debug:
            raise
        print(f"autotune: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("autotune: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a database error that reached here (Optuna's own calls)
        from autotune.storage import mask, resolve_url, scrub
        from autotune.storage.retry import database_error, final_reason

        found = database_error(exc)
        if found is None or args.debug:
            raise
        url = resolve_url(getattr(args, "storage", None))
        text = (str(getattr(found, "orig", None) or found).strip().splitlines() or [""])[0]
        why = final_reason(found) or "the database failed"
        print(f"autotune: error: storage {mask(url)}: {why} ({scrub(text, url)})", file=sys.stderr)
        return 2
