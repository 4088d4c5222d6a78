"""Recompile limits in words: what dynamo gave up on, the guard that failed, torch's fix, and how
many repeated blocks ran eager because of it.

Past ``torch._dynamo.config.recompile_limit`` graphs for one code object, dynamo stops compiling
it and runs every call its graphs' guards reject as plain Python. Per-layer int attributes
(``layer_idx``) make each block its own graph, so 16 blocks with a limit of 8 leave 8 of them
eager, and the trial's latency is not the compiled latency. :func:`eager_blocks` counts them
exactly: it watches, during one probe call, which blocks' own ``forward`` code runs as Python
(a compiled block runs dynamo's transformed code instead).
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from autotune.strategy.granularity import is_repeated_blocks
from autotune.trial import metrics
from autotune.trial.measurement import Graphs

if TYPE_CHECKING:
    import torch

_HINT = re.compile(r"\(HINT: (.*?)\)\s*$", re.S)


def blocks_of(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's longest list of repeated blocks (``[]`` if it has none)."""
    lists = [m for m in model.modules() if is_repeated_blocks(m)]
    return list(max(lists, key=len)) if lists else []


def units_of(model: torch.nn.Module, granularity: str) -> list[torch.nn.Module]:
    """The modules whose forward a compile of ``granularity`` replaces with dynamo's code: the
    repeated blocks, and, but for a regional compile (which leaves the model's own forward in
    Python), the model itself. One of them running its own forward as Python ran eager."""
    blocks = blocks_of(model)
    return blocks if granularity == "regional" else [model, *blocks]


@contextlib.contextmanager
def eager_blocks(blocks: list[torch.nn.Module]) -> Iterator[set[int]]:
    """Yield a set that fills with the indices of ``blocks`` whose forward ran uncompiled.

    A block's own forward code runs as Python only where it ran eager (a compiled block runs
    Dynamo's transformed code, and a compile traces it without running it). Compiled copies
    of a block (regional, nested) share its parameter dict, which identifies it.
    """
    codes = {inspect.unwrap(type(b).forward).__code__ for b in blocks}
    index = {id(b._parameters): i for i, b in enumerate(blocks)}
    seen: set[int] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in codes:
            owner = frame.f_locals.get("self")
            i = index.get(id(getattr(owner, "_parameters", None)))
            if i is not None:
                seen.add(i)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:  # not while Dynamo compiles: it runs no block's forward, and Python under a
        # profile function runs 3x slower (a compile of 5 s took 16)
        with metrics.around_compiles(lambda: sys.setprofile(None),
                                     lambda: sys.setprofile(profile)):  # fmt: skip
            yield seen
    finally:
        sys.setprofile(previous)


def probe(blocks: list[torch.nn.Module], call: Callable[[], Any]) -> int:
    """How many of ``blocks`` ran eager during one ``call``."""
    with eager_blocks(blocks) as seen:
        call()
    return len(seen)


def split_reason(reason: str) -> tuple[str, str]:
    """A recompile reason as (the guard that failed, torch's hint or '')."""
    first = reason.split("User stack trace:")[0].strip()
    hint = _HINT.search(first)
    guard = re.sub(r"^\d+/\d+: ", "", first[: hint.start()] if hint else first)
    guard = " ".join(guard.split("#")[0].split())
    return guard, " ".join(hint.group(1).split()) if hint else ""


def fix(guard: str, hint: str) -> str:
    """The fix torch suggests for the failing guard, in one phrase."""
    if hint:
        return hint.split("you might want to ")[-1].rstrip(".")
    if "size mismatch" in guard:
        return "mark the dimension dynamic (torch._dynamo.mark_dynamic) or compile with dynamic"
    return "raise torch._dynamo.config.recompile_limit if the recompiles are expected"


def describe(
    graphs: Graphs, model: torch.nn.Module, calls: dict[str, Callable[[], Any]]
) -> Graphs:
    """Fill ``graphs.limit_*`` if dynamo hit a recompile limit.

    Each of ``calls`` (e.g. ``{"prefill": ..., "decode": ...}``) is then probed once for the
    repeated blocks of ``model`` that it ran eager.
    """
    hits = metrics.limit_hits()
    if not hits:
        return graphs
    hit = hits[0]
    guard, hint = split_reason(hit["reason"])
    blocks = blocks_of(model)
    eager = {phase: probe(blocks, call) for phase, call in calls.items()} if blocks else {}
    words = f"recompile limit ({hit['limit']}) hit"
    if eager:
        counts = [f"{n} of {len(blocks)} blocks ran eager" for n in eager.values()]
        if len(eager) > 1:
            counts = [f"{phase}: {c}" for phase, c in zip(eager, counts, strict=True)]
        words += ": " + ", ".join(counts)
    words += f"; {hit['function']} was compiled {hit['graphs']} times"
    if guard:
        words += f", then the guard {guard!r} failed"
    if len(hits) > 1:
        words += f" (and {len(hits) - 1} more code objects hit it)"
    graphs.limit_hit = words
    graphs.limit_hint = fix(guard, hint)
    graphs.blocks = len(blocks) or None
    graphs.eager_blocks = list(eager.values())[-1] if eager else None
    return graphs
