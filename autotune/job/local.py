"""A tuning run on this machine, as :func:`tune` and ``autotune search`` run it
(:class:`LocalTuning`): in this process, or (``search --workers K``) in K processes of the
library's own worker entry point (:mod:`autotune.job.spawned`) joined to one study, followed to
its end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import autotune.device
from autotune import usercode, variables
from autotune.errors import AutotuneError, ConfigError
from autotune.job.tuning import Tuned, Tuning

if TYPE_CHECKING:
    from autotune.search import Listener, Outcome, Search, StudySpec


def worker_env(url: str, device: str, workers: int) -> dict[str, str]:
    """A local worker's environment: the study's storage (which ``ps`` does not show), its one
    GPU as ``CUDA_VISIBLE_DEVICES`` (it measures on ``cuda:0``, so caches it makes load on a
    user's ``cuda:0``), and its share of the CPU for Inductor's compile workers."""
    env = {**os.environ, variables.STORAGE: url, **autotune.device.alone(device)[1]}
    env["TORCHINDUCTOR_COMPILE_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    return env


STDERR = 2  # the search's own standard error, as a file descriptor


class LocalWorkers:
    """``search --workers K``: K worker processes on this machine, one per GPU where there
    are GPUs, joined to the study through its storage URL (passed in the environment, which
    ``ps`` does not show). What the workers print goes to the search's standard error: its
    standard output is the search's answer alone (``--json`` is read by programs)."""

    def __init__(self, study: str, url: str, devices: list[str], allow: list[str]) -> None:
        argv = [sys.executable, "-m", "autotune.job.spawned", "--study", study]
        if allow:  # the code the search's own command line named
            argv += ["--allow-code", ",".join(allow)]
        self.procs = [
            subprocess.Popen([*argv, "--device", "cuda:0" if d.startswith("cuda") else d],
                             stdin=subprocess.DEVNULL, stdout=STDERR,
                             env=worker_env(url, d, len(devices)))
            for d in devices
        ]  # fmt: skip

    @staticmethod
    def devices(device: str, count: int, force: bool = False) -> list[str]:
        """One GPU per worker, from the study's (``cuda:3`` and 2 workers: ``cuda:3``,
        ``cuda:4``), never two on one unless forced; the same CPU for every worker."""
        if count < 1:
            raise ConfigError("--workers must be at least 1")
        if not device.startswith("cuda"):
            return [device] * count
        first, seen = int(device.partition(":")[2] or 0), autotune.device.count()
        if first + count > seen and not force:
            raise ConfigError(f"--workers {count} from {device} needs GPUs {first} to "
                              f"{first + count - 1}, and {seen} are visible: one worker per "
                              "GPU (--force shares them, which skews every timing)")  # fmt: skip
        return [f"cuda:{(first + i) % seen}" for i in range(count)]

    def follow(self, done: Callable[[], int], listener: Listener) -> str:
        """Wait for the workers to end, telling ``listener`` each time ``done()`` (the study's
        measured strategies) grows; ``finished``, or ``interrupted`` (Ctrl-C stops them all)."""
        seen = -1
        try:
            while self.running():
                if (now := done()) != seen:
                    seen = now
                    listener.measured(f"{len(self.procs)} workers", now)
                time.sleep(2)
        except KeyboardInterrupt:
            self.stop()
            return "interrupted"
        return "finished"

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        """Each worker stops as cleanly as on Ctrl-C."""
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()

    def failures(self) -> list[int]:
        return [p.returncode for p in self.procs if p.returncode != 0]


class LocalTuning(Tuning):
    """A tuning run on this machine (:func:`tune`, ``autotune search``): in this process, or in
    ``workers`` > 1 worker processes (:class:`LocalWorkers`) that each join the study as a
    :class:`Tuning` of their own, this one measuring the baseline first and confirming after."""

    def __init__(self, search: Search, force: bool = False, workers: int = 1) -> None:
        super().__init__(search, force)
        self.workers = workers

    @classmethod
    def open(
        cls, spec: StudySpec, storage: str | None = None, *, force: bool = False,
        began: float | None = None, workers: int = 1,
    ) -> Self:  # fmt: skip
        """:meth:`Tuning.open`, its workers' devices checked first (one GPU each)."""
        if workers != 1:  # before anything is stored
            LocalWorkers.devices(spec.workload.device, workers, force)
        tuning = super().open(spec, storage, force=force, began=began)
        tuning.workers = workers
        return tuning

    @property
    def alone(self) -> bool:
        return self.workers == 1

    def run(self, listener: Listener | None = None, *, max_measure: int | None = None,
            leave: bool = False) -> Outcome:  # fmt: skip
        """:meth:`Tuning.run` here, or (``workers`` > 1) :func:`run_workers`: the baseline
        here, the trials in the workers."""
        if self.workers == 1:
            return super().run(listener, max_measure=max_measure, leave=leave)
        self.outcome = run_workers(self.search, self.workers, listener, self.force)
        return self.outcome


def run_workers(
    search: Search, count: int, listener: Listener | None = None, force: bool = False
) -> Outcome:
    """Measure the baseline (and the reference) here, then start ``count`` local worker
    processes on the study and follow them to the end; the time they took is the plan's
    ``workers`` share of the budget's split."""
    from autotune.search import Lines
    from autotune.search.baseline import baseline
    from autotune.search.loop import outcome

    listener = listener or Lines()
    workload = search.spec.workload
    devices = LocalWorkers.devices(workload.device, count, force)
    if not workload.is_cuda:
        listener.note("warning: parallel trials on a CPU share its cores, which skews both "
                      "compile time and latency")  # fmt: skip
    baseline(search, listener)
    allow = [name for _, name in usercode.named(search.spec)]  # checked against the command line
    began = time.time()
    workers = LocalWorkers(search.name, search.store.url, devices, allow)
    stopped = workers.follow(lambda: len(search.measured()), listener)
    search.plan.spent["workers"] = time.time() - began
    if stopped == "interrupted":
        return outcome(search, 0, 0, stopped)
    if failed := workers.failures():
        raise AutotuneError(f"{len(failed)} of {count} workers failed (exit {failed[0]})")
    result = outcome(search, 0, 0, "budget")
    if result.measured + result.deduced >= len(search.keys):
        result.stopped = "exhausted"
    return result


def tune(
    spec: StudySpec | str, *, storage: str | None = None, workers: int = 1,
    listener: Listener | None = None, confirm: bool = True, fmt: str = "accelerate",
    out: str | None = None, force: bool = False, **flags: Any,
) -> Tuned:  # fmt: skip
    """Search how to compile a model, confirm the pick and export it: one :class:`LocalTuning`.

    ``spec`` is a :class:`~autotune.search.spec.StudySpec`, or a model (a preset, a directory
    or ``package.module:function``) with the command line's settings as keywords
    (``layers=2, backend="eager,inductor", trials=8``), its default time budget
    ``autotune search``'s. Trials go to ``storage`` (default ``sqlite:///studies/autotune.db``);
    ``workers`` > 1 runs local worker processes. Bad input raises
    :class:`~autotune.errors.ConfigError` before anything is stored.
    """
    from autotune.search.spec import StudySpec

    if isinstance(spec, str):
        spec = StudySpec.from_sources(None, searched=True, model=spec, **flags)
    tuning = LocalTuning.open(spec, storage, workers=workers, force=force)
    outcome = tuning.run(listener)
    if outcome.stopped == "interrupted":
        return Tuned(tuning.name, outcome)
    return tuning.finish(confirm=confirm, fmt=fmt, out=out, listener=listener)
