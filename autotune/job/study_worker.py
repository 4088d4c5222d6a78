"""A study's worker (``autotune worker --study NAME``, and each worker ``search --workers K``
spawns through :mod:`autotune.job.spawned`): join one study as a Tuning and run it until it is
done (its time budget, its plan's, starts as it joins)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.search import Listener, Outcome, Search


def work(
    study: str | None, storage: str | None = None, *, device: str | None = None,
    force: bool = False, allow: Iterable[str] = (), clean: bool = True,
    trials: int | None = None,
    listener: Callable[[Search], AbstractContextManager[Listener]] | None = None,
) -> Outcome:  # fmt: skip
    """Join one study as a :class:`~autotune.job.tuning.Tuning` and run it until its budget,
    time or space runs out (or, with ``trials``, until this worker has measured that many); say
    on stdout which worker joined and how it ended. ``listener`` makes what follows the search
    once it is joined (the CLI's bar); ``clean=False`` for a worker whose parent search has
    cleaned the study (a sibling's trial between ask and claim must not look like one a dead
    run left RUNNING)."""
    from autotune.job.tuning import Tuning
    from autotune.search import Lines
    from autotune.search.spec import check_name

    if not study:
        raise ConfigError("give --study NAME (autotune studies lists them); autotune "
                          "queue-worker serves every study")  # fmt: skip
    tuning = Tuning.join(check_name(study), storage, device=device, force=force,
                         allow=list(allow), clean=clean)  # fmt: skip
    search = tuning.search
    print(f"worker {search.worker} on study {search.name} in {search.storage_shown}", flush=True)
    following = listener(search) if listener else contextlib.nullcontext(Lines())
    with following as follower:
        outcome = tuning.run(follower, max_measure=trials)
    print(f"worker {search.worker}: measured {outcome.measured_here}, stopped: {outcome.stopped}")
    return outcome
