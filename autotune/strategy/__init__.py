"""Stage 1, how to compile: a :class:`~autotune.strategy.strategy.Strategy`, Inductor's modes and
option switches (:mod:`.inductor`), the search space (:mod:`.space`) and how a strategy is applied
to a model at its granularity (:mod:`.granularity`)."""
