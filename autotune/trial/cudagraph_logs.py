"""What Inductor logs of its CUDA graphs, read while a trial runs: each fallback (a graph run
without them, and why: :func:`cudagraph_skips`) and each recording (:func:`cudagraph_recordings`).
Neither has a public API, so the log lines are read here alone (see below)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

# Inductor logs each CUDA-graph fallback through one function, which also bumps its private
# counter; it bumps the counter alone, with no line, for a graph with no CUDA device (one that
# never had CUDA graphs to lose: torch/_inductor/output_code.py, CompiledFxGraph.post_compile).
# So the lines count, not the counter, each with the compile it arose in (its region). Its
# CUDA-graph trees log each recording, one line from one method (cudagraph_trees.py,
# CUDAGraphTreeManager.record_function): the only trace of a recording, which has no counter.
# None of this has a public API: it is read here alone, and tests/trial/test_cudagraph_logs.py's
# test_cudagraph_skips_are_read_from_inductor and test_cudagraph_recordings_are_read_from_inductor
# fail loudly if it changes.
SKIP_LOGGER = "torch._inductor.cudagraph_utils.__cudagraphs"
SKIP_FUNCTION = "log_cudagraph_skip_and_bump_counter"
RECORD_LOGGER = "torch._inductor.cudagraph_trees.__cudagraphs"
RECORD_FUNCTION = "record_function"


class _Lines(logging.Handler):
    """The lines one function of torch logs, each with the compile id it arose in."""

    def __init__(self, function: str) -> None:
        super().__init__(logging.DEBUG)
        self.function = function
        self.found: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.funcName == self.function:
            from torch._guards import CompileContext

            compile_id = CompileContext.current_compile_id()
            self.found.append(("" if compile_id is None else str(compile_id), record.getMessage()))


@contextlib.contextmanager
def _lines(logger_name: str, function: str) -> Iterator[_Lines]:
    """While open, collect what ``function`` logs on ``logger_name``; torch's own output of
    those lines stays as the user set it (off, unless ``TORCH_LOGS`` asked)."""
    handler, logger = _Lines(function), logging.getLogger(logger_name)
    level, propagate = logger.level, logger.propagate
    logger.propagate = propagate and logger.isEnabledFor(logging.DEBUG)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


@contextlib.contextmanager
def cudagraph_skips() -> Iterator[Callable[[], list[tuple[str, str]]]]:
    """While open, collect the CUDA-graph fallbacks Inductor logs; yields a reader of each one's
    (compile id, reason): the compile id of the graph it arose in while compiling (as Dynamo's
    compilation metrics name it), "" for one at run time."""
    with _lines(SKIP_LOGGER, SKIP_FUNCTION) as handler:
        yield lambda: list(handler.found)


@contextlib.contextmanager
def cudagraph_recordings() -> Iterator[Callable[[], int]]:
    """While open, count the CUDA graphs Inductor records (a graph's second call at a new set
    of sizes, or in a new compile, records; its first runs eager to warm up); yields a reader
    of the count so far. None on a CPU."""
    with _lines(RECORD_LOGGER, RECORD_FUNCTION) as handler:
        yield lambda: len(handler.found)
