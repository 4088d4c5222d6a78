"""The queue's worker (:func:`serve`: ``autotune queue-worker``; one study's worker is
:mod:`autotune.job.study_worker`).

A queue worker takes the oldest open study that fits this machine, joins it as a
:class:`~autotune.job.tuning.Tuning` and runs it until it is done (or what is left is in live
peers' hands; its time budget starts as it joins), finishes each study it ends (confirmed,
exported), then takes the next; it stops when asked (Ctrl-C, SIGTERM) or after an idle
timeout. Workers on many machines share a study through its claims: no strategy is measured
twice and a dead worker's is handed back (:mod:`autotune.coordination`).
Which study is next is :class:`autotune.job.queue.Queue`'s answer.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autotune import usercode
from autotune.errors import AutotuneError
from autotune.job.queue import Queue
from autotune.search import studies
from autotune.search.spec import StudySpec
from autotune.storage import Store

if TYPE_CHECKING:
    from autotune.job.tuning import Tuning
    from autotune.search import Listener

POLL_S = 2.0  # how often an idle worker looks at the queue again
AGAIN_S = 10.0  # a study left with nothing to do here is not looked at again for this long


@dataclass
class Shift:
    """What a queue worker did: the studies it worked on, strategies it measured, the studies
    it finished (its trial ended the budget or the space), and why it stopped (``idle``, or
    ``asked``: Ctrl-C or SIGTERM)."""

    studies: list[str] = field(default_factory=list)
    measured: int = 0
    finished: list[str] = field(default_factory=list)
    stopped: str = "idle"


def device_for(given: str | None) -> Callable[[str], str | None]:
    """The device this worker measures a study's device on: a CPU study on the CPU (every
    machine has one), a CUDA study on ``given`` or the current GPU; none where this machine has
    no GPU or the worker was given the CPU."""
    from autotune import device

    def choose(study_device: str) -> str | None:
        if not study_device.startswith("cuda"):
            return "cpu"
        if given is not None:
            return given if given.startswith("cuda") else None
        return device.resolve("cuda") if device.count() else None

    return choose


def allowed_by(allow: Iterable[str]) -> Callable[[StudySpec], str | None]:
    """Whether the code a stored spec names was allowed on this worker's command line."""
    names = list(allow)

    def check(spec: StudySpec) -> str | None:
        refused = [n for _, n in usercode.named(spec) if not usercode.allowed(n, names)]
        return f"it names code this worker may not run ({', '.join(refused)})" if refused else None

    return check


def work_queue(
    storage: str | None, *, device: str | None = None, allow: Iterable[str] = (),
    idle_timeout_s: float | None = None, listener: Listener | None = None, confirm: bool = True,
) -> Shift:  # fmt: skip
    """Serve the storage's queue until asked to stop or idle for ``idle_timeout_s``; each study
    this worker ends, it finishes as a :class:`~autotune.job.tuning.Tuning` (the pick confirmed
    unless ``confirm`` is false, then exported), telling ``listener``."""
    from autotune.environment import fingerprint
    from autotune.search import Lines

    listener = listener or Lines()
    allow = list(allow)
    store = Store(storage)
    store.retry = True  # the queue's own reads wait out an outage, as a search does
    # this machine's fingerprint for a study's device and dtype, as its trials would run here
    queue = Queue(store, device_for(device), functools.cache(fingerprint), allowed_by(allow))
    shift = Shift()
    left: dict[str, float] = {}  # studies left with nothing to do here, and when
    idle_since = time.monotonic()
    try:
        while True:
            now = time.monotonic()
            study = queue.next(exclude=[n for n, t in left.items() if now - t < AGAIN_S])
            if study is None:
                if idle_timeout_s is not None and now - idle_since >= idle_timeout_s:
                    return shift
                listener.now("waiting for a study")
                time.sleep(POLL_S)
                continue
            outcome = _work(study.name, store, queue, allow, listener, confirm)
            if outcome is None:
                continue
            measured, stopped = outcome
            if study.name not in shift.studies:
                shift.studies.append(study.name)
            shift.measured += measured
            if stopped == "interrupted":
                shift.stopped = "asked"
                return shift
            if stopped in ("budget", "exhausted"):
                shift.finished.append(study.name)
            if measured == 0 and stopped == "others finishing":
                left[study.name] = time.monotonic()
            idle_since = time.monotonic()
    except KeyboardInterrupt:
        shift.stopped = "asked"
        return shift


def _work(
    name: str, store: Store, queue: Queue, allow: list[str], listener: Listener, confirm: bool,
) -> tuple[int, str] | None:  # fmt: skip
    """Join one study and measure until it is done here: (measured here, why it stopped); None
    when the study was refused (then this worker skips it from now on, and says why once)."""
    from autotune.job.tuning import Tuning

    try:
        record = studies.study(store, name)
        device = queue.device(record) if record is not None else None
        tuning = Tuning.join(name, store.url, device=device, allow=allow)
        search = tuning.search
    except AutotuneError as exc:
        queue.skipped[name] = str(exc)
        listener.note(f"skipping study {name}: {exc}")
        return None
    listener.note(f"worker {search.worker} on study {name} in {search.storage_shown}")
    try:
        outcome = tuning.run(listener, leave=True)
    except AutotuneError as exc:  # its baseline did not run, ...
        queue.skipped[name] = str(exc)
        listener.note(f"study {name} stopped here: {exc}; skipping it from now on")
        search.store.engine.dispose()
        return None
    try:
        if outcome.stopped in ("budget", "exhausted"):
            finish(tuning, listener, confirm)
    except AutotuneError as exc:  # the measurements stand; the study's export failed
        listener.note(f"study {name} is done, but its export failed: {exc}")
    finally:
        search.store.engine.dispose()
    return outcome.measured_here, outcome.stopped


def finish(tuning: Tuning, listener: Listener, confirm: bool) -> None:
    """A study this worker ended, finished as every tuning run is: confirmed, exported."""
    search = tuning.search
    if confirm:
        listener.note(f"study {search.name} is done: confirming its pick…")
    tuned = tuning.finish(confirm=confirm, listener=listener)
    chosen = tuned.chosen.key if tuned.chosen else "none"
    listener.note(f"study {search.name}: chosen ({search.spec.policy}) {chosen}; wrote "
                  f"{tuned.path}")  # fmt: skip
