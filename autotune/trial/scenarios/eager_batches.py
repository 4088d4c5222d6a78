"""The batches of a continuous-batching manager that ran part of the model eager past Dynamo's
recompile limit, and the requests they served.

A manager serves from a thread of its own, so the profile function that sees code run as
Python (:func:`autotune.trial.recompiles.eager_blocks`'s rule: a compiled frame runs Dynamo's
transformed code, a frame left eager its own) is handed to that thread as it starts
(``threading.setprofile``) and takes itself off at its first call after :meth:`Watch.serving`.
It marks each step as its batch is scheduled (what the scheduler's ``schedule_batch`` returns,
before every batch: the requests in it), and when each module's ``forward`` of the model ran
as Python. After the pass, a step ran eager where a forward that Dynamo's own records name as
past its recompile limit (:func:`autotune.trial.metrics.limit_hits`) ran as Python in it; its
requests were served, in part, eager. A function past the limit that is no forward of the model
(transformers' step function) is named apart, not counted: Dynamo then runs what it calls from
the graphs already compiled for them, else eager without compiling (``RUN_ONLY``); a forward
also runs as Python where Dynamo skipped its frame, so such a run alone shows no limit.
While watched, the manager's Python runs slower (a pass of a tiny Llama 1.2-1.7x here): only
the first pass is watched, whose figures are its stalls.
"""

from __future__ import annotations

import bisect
import contextlib
import inspect
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import CodeType
from typing import Any

from autotune.trial import metrics


def spelled(code: CodeType) -> str:
    """A code object as :func:`autotune.trial.metrics.limit_hits` names a function."""
    return f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"


class Watch:
    """When each step of a manager began, and when each forward of ``model`` ran as Python."""

    def __init__(self, model: Any) -> None:
        from transformers.generation.continuous_batching import Scheduler

        self.forwards = {inspect.unwrap(type(m).forward).__code__ for m in model.modules()}
        self.steps_at = {c.schedule_batch.__code__ for c in _subclasses(Scheduler)}
        self.steps: list[tuple[float, list[str]]] = []  # each batch: when, and its requests
        self.ran: list[tuple[float, CodeType]] = []  # a forward that ran as Python, and when
        self.on = True
        self.thread: int | None = None  # the manager's, the first to call the profile
        self.ready = threading.Event()

    def attach(self, start: Callable[[], None]) -> None:
        """Run ``start`` (a manager's), handing the profile to the thread it starts, and to no
        thread started later (Inductor's compile workers, say)."""
        threading.setprofile(self.profile)
        try:
            start()
            self.ready.wait(5.0)  # the thread takes the hook as it starts, after start() ends
        finally:
            threading.setprofile(None)

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        """The profile function of the manager's thread (``threading.setprofile``)."""
        if self.thread is None:
            self.thread = threading.get_ident()
            self.ready.set()
        if not self.on or threading.get_ident() != self.thread:
            sys.setprofile(None)  # this thread's: after serving, or not the manager's
        elif event == "call" and frame.f_code in self.forwards:
            self.ran.append((time.perf_counter(), frame.f_code))
        elif event == "return" and frame.f_code in self.steps_at and arg and arg[0]:
            ids = [getattr(getattr(f, "state", None), "request_id", "?") for f in arg[0]]
            self.steps.append((time.perf_counter(), ids))

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """The block in which the manager serves the watched pass: the profile is off while
        Dynamo compiles (it traces no forward, and Python under a profile function runs 3x
        slower: the stalls would be), and for good after the block."""
        here = threading.get_ident

        def pause() -> None:
            if here() == self.thread:
                sys.setprofile(None)

        def resume() -> None:
            if here() == self.thread and self.on:
                sys.setprofile(self.profile)

        try:
            with metrics.around_compiles(pause, resume):
                yield
        finally:
            self.on = False  # the profile function takes itself off the thread

    def served_eager(self, hits: list[dict[str, Any]]) -> tuple[int, set[str]]:
        """How many batches ran a forward named in the recompile limit's ``hits`` eager, and
        the ids of the requests in them."""
        named = {h["function"] for h in hits}
        times = [when for when, _ in self.steps]
        eager: dict[int, list[str]] = {}
        for at, code in self.ran:
            step = bisect.bisect_right(times, at) - 1
            if step >= 0 and spelled(code) in named:
                eager[step] = self.steps[step][1]
        return len(eager), {rid for ids in eager.values() for rid in ids}

    def unwatched(self, hits: list[dict[str, Any]]) -> list[str]:
        """The functions of ``hits`` that are no forward of the model (transformers' own step
        function, say): no batch counts as eager for them (see the module's docstring)."""
        watched = {spelled(code) for code in self.forwards}
        return sorted({h["function"] for h in hits} - watched)


def _subclasses(cls: type) -> list[type]:
    found = [cls]
    for sub in cls.__subclasses__():
        found += _subclasses(sub)
    return [c for c in found if "schedule_batch" in vars(c)]
