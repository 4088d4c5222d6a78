"""autotune: how should I torch.compile this model, on this machine?

The public API:

- :func:`tune`: search how to compile a model, confirm the pick and export it, as one
  :class:`Tuning` run (open, run with a listener, finish: what ``autotune search`` and every
  queue worker run);
- :func:`measure`: one :class:`Strategy` on one model (:class:`ModelRef`) and
  :class:`Workload`, cold, in a fresh process, as a :class:`Measurement`;
- :func:`apply` and :func:`apply_generation`: compile a model (or its ``generate``) as a
  strategy or an exported file says; :func:`load_plugin`: an exported file as Accelerate's
  ``TorchDynamoPlugin``;
- :class:`AutotuneError` (every error autotune reports; :class:`ConfigError` for bad input) and
  :class:`AutotuneWarning` (every warning; :class:`CacheWarning` for an artefact not loaded).
"""

from __future__ import annotations

from autotune.catalog import ModelRef
from autotune.errors import (
    AutotuneError,
    AutotuneWarning,
    CacheWarning,
    ConfigError,
    NotApplicable,
)
from autotune.job.tuning import Tuned, Tuning, tune
from autotune.ship.apply import apply, apply_generation, load_plugin
from autotune.strategy.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.trial.parent import measure
from autotune.workload import Settings, Workload

__all__ = [
    "AutotuneError",
    "AutotuneWarning",
    "CacheWarning",
    "ConfigError",
    "Measurement",
    "ModelRef",
    "NotApplicable",
    "Settings",
    "Strategy",
    "Tuned",
    "Tuning",
    "Workload",
    "apply",
    "apply_generation",
    "load_plugin",
    "measure",
    "tune",
]
