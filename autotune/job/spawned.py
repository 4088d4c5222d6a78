"""The worker that ``search --workers K`` spawns on this machine (:mod:`autotune.job.local`):
``python -m autotune.job.spawned --study NAME --device D [--allow-code LIST]``, the storage in
``$AUTOTUNE_STORAGE``. It runs :func:`autotune.job.study_worker.work` (a joined
:class:`~autotune.job.tuning.Tuning`) as ``autotune worker`` does, with no bar, on a study its
parent search has cleaned."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from autotune.job.exits import guarded
    from autotune.job.study_worker import work

    parser = argparse.ArgumentParser(prog="python -m autotune.job.spawned", allow_abbrev=False)
    parser.add_argument("--study", required=True)
    parser.add_argument("--device")
    parser.add_argument("--allow-code", default="")
    args = parser.parse_args(argv)
    allow = [n.strip() for n in args.allow_code.split(",") if n.strip()]

    def command() -> int:
        outcome = work(args.study, device=args.device, allow=allow, clean=False)
        return 130 if outcome.stopped == "interrupted" else 0

    return guarded(command)


if __name__ == "__main__":
    sys.exit(main())
