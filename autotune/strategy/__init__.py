"""Stage 1, how to compile: a :class:`Strategy` (:mod:`.strategy`), Inductor's modes and option
switches (:mod:`.inductor`), what the running torch offers (:mod:`.torch_facts`), the search
space (:class:`Space`, :mod:`.space`), the shapes of a traffic (:mod:`.shapes`, :mod:`.padding`)
and how a strategy is applied to a model at its granularity (:mod:`.granularity`)."""

from __future__ import annotations

from autotune.strategy.inductor import inductor_modes
from autotune.strategy.space import Space
from autotune.strategy.strategy import (
    BUILTIN_BACKENDS,
    OPTIONAL_DEFAULTS,
    Strategy,
    is_registered,
    registered_backends,
)

__all__ = [
    "BUILTIN_BACKENDS",
    "OPTIONAL_DEFAULTS",
    "Space",
    "Strategy",
    "inductor_modes",
    "is_registered",
    "registered_backends",
]
