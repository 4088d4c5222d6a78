"""The search: one process's part in an Optuna study of compile strategies.

- :mod:`.state`: what one process's search holds (:class:`Search`), and its :class:`Listener`;
- :mod:`.open`: set-up and resume (:func:`open_search`), :func:`submit` and :func:`join`;
- :mod:`.step`: one trial's protocol, ask → de-duplicate → claim → measure → store → tell;
- :mod:`.loop`: steps until the budget, time or space runs out, reporting to a listener;
- :mod:`.deduction`: what a trial proves about others, and what to measure first;
- :mod:`.sampler`: Optuna's samplers, steered away from taken strategies.

It knows nothing of how a model is compiled: it asks the space for a strategy, the runner for
a measurement, and stores both.
"""

from __future__ import annotations

from autotune.search.loop import Outcome, run, run_workers
from autotune.search.open import join, open_search, submit
from autotune.search.state import Lines, Listener, Search

__all__ = [
    "Lines",
    "Listener",
    "Outcome",
    "Search",
    "join",
    "open_search",
    "run",
    "run_workers",
    "submit",
]
