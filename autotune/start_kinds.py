"""The start kinds: one table that every stage reads, so that a new start is one row.

A start is what compiling a strategy costs when a process starts: ``cold`` (empty caches, the
trial itself), ``warm`` (the cold start's cache directories: a restart on the same machine),
``portable`` (empty caches plus the shipped cache artefact: a new machine), ``precompiled`` and
``aot`` (a precompiled function or an AOTInductor package that skips the compiler). Each row
says which objective stands for the start, Optuna's metric name for it, its label for people,
what ships for it, and how it starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.errors import ConfigError
from autotune.fields import texts


@dataclass(frozen=True)
class StartKind:
    """One kind of start."""

    name: str  # as written in --starts
    objective: str  # the objective that stands for its cost (``compile`` is the cold start)
    metric: str  # Optuna's metric name for that objective
    label: str  # a column heading for people
    suffix: str  # what export ships for it, named best + suffix ("" where nothing)
    caches: bool = False  # a warm or portable start: reuses Inductor's compile caches
    skips_compiler: bool = False  # loads a compiled artefact instead of compiling


TABLE = (
    StartKind("cold", "compile", "compile_s", "cold start", ""),
    StartKind("warm", "warm", "warm_start_s", "warm start", "", caches=True),
    StartKind("portable", "portable", "portable_start_s", "portable", ".cache.bin", caches=True),
    StartKind("precompiled", "precompiled", "precompiled_start_s", "precompiled",
              ".precompiled.bin", skips_compiler=True),
    StartKind("aot", "aot", "aot_start_s", "aot", ".aot.pt2", skips_compiler=True),
)  # fmt: skip
BY_NAME = {k.name: k for k in TABLE}
BY_OBJECTIVE = {k.objective: k for k in TABLE}
KINDS = tuple(BY_NAME)
LATER = KINDS[1:]  # every start after a cold one
CACHED = tuple(k.name for k in TABLE if k.caches)
AHEAD = tuple(k.name for k in TABLE if k.skips_compiler)
DEFAULT = ("cold", "warm", "portable")


def parse(starts: str | Sequence[str], key: str = "starts") -> tuple[str, ...]:
    """``cold`` then any of the later kinds, as a tuple in the table's order; ConfigError
    otherwise."""
    wanted = texts(starts, key)
    if (
        not wanted
        or wanted[0] != "cold"
        or len(set(wanted)) != len(wanted)
        or any(w not in KINDS for w in wanted)
    ):
        raise ConfigError(f"bad starts {','.join(wanted)!r}: cold, then any of "
                          f"{', '.join(LATER)} (e.g. cold,warm)")  # fmt: skip
    return tuple(k for k in KINDS if k in wanted)
