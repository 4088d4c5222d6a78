"""Stage 5, the search: one process's part in an Optuna study of compile strategies.

- :mod:`.spec`: the study's spec (:class:`~autotune.search.spec.StudySpec`), from TOML and flags;
- :mod:`.studies`: a store's studies, each spec read back typed (:class:`~.studies.StudyRecord`);
- :mod:`.state`: what one process's search holds (:class:`Search`), and its :class:`Listener`;
- :mod:`.open`: set-up and resume (:func:`open_search`), :func:`submit` and :func:`join`;
- :mod:`.step`: one trial's protocol, ask → de-duplicate → claim → measure → store → tell;
- :mod:`.loop`: steps until the budget, time or space runs out, reporting to a listener;
- :mod:`.plan`: what the time budget affords here, learned from what the search has paid;
- :mod:`.deduction`: what a trial proves about others, and what to measure first;
- :mod:`.sampler` and :mod:`.surrogate`: Optuna's samplers, steered away from taken
  strategies, and autotune's model of the factors;
- :mod:`.overview`: what a study shows of its progress (``autotune studies``, the service).

It knows nothing of how a model is compiled: it asks the space for a strategy, the trial stage
(:mod:`autotune.trial.parent`) for a measurement, and stores both.
"""

from __future__ import annotations

from autotune.search.loop import Outcome, run
from autotune.search.open import join, open_search, submit
from autotune.search.spec import StudySpec
from autotune.search.state import Lines, Listener, Search

__all__ = [
    "Lines",
    "Listener",
    "Outcome",
    "Search",
    "StudySpec",
    "join",
    "open_search",
    "run",
    "submit",
]
