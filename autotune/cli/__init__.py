"""The ``autotune`` command. Heavy modules are imported inside each command, so --help is instant.

User errors (``AutotuneError``) end in one line on stderr and a non-zero exit; a traceback
only with ``--debug`` (:mod:`autotune.job.exits`, as a spawned worker ends). The parser is in
:mod:`autotune.cli.parser`; the commands in :mod:`autotune.cli.search` (measure, search),
:mod:`autotune.cli.serve` (serve: the HTTP service) and :mod:`autotune.cli.study` (the
rest, the queue worker's too); the live bar in :mod:`autotune.cli.progress`.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.cli.parser import build_parser, model_and_workload
from autotune.cli.search import cmd_measure, cmd_search
from autotune.cli.serve import cmd_serve
from autotune.cli.study import (
    cmd_check,
    cmd_dashboard,
    cmd_export,
    cmd_models,
    cmd_queue_worker,
    cmd_show,
    cmd_studies,
    cmd_submit,
    cmd_worker,
)
from autotune.job.exits import guarded

__all__ = ["COMMANDS", "build_parser", "main", "model_and_workload"]

COMMANDS = {
    "models": cmd_models, "measure": cmd_measure, "search": cmd_search, "export": cmd_export,
    "dashboard": cmd_dashboard, "studies": cmd_studies, "submit": cmd_submit, "show": cmd_show,
    "worker": cmd_worker, "queue-worker": cmd_queue_worker, "serve": cmd_serve,
    "check": cmd_check,
}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return guarded(lambda: COMMANDS[args.command](args), debug=args.debug,
                   storage=getattr(args, "storage", None))  # fmt: skip
