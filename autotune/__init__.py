"""autotune: how should I torch.compile this model, on this machine?

The public API:

- :func:`tune`: search how to compile a model, confirm the pick and export it, as one
  :class:`Tuning` run (open or join, run with a listener, finish: what ``autotune search``,
  every worker and every queue worker run);
- :func:`load_study`: a stored study, read once: its answer under any policy, its
  measurements, its tally (the read side every command reads through);
- :func:`measure`: one :class:`Strategy` on one model (:class:`ModelRef`) and
  :class:`Workload`, cold, in a fresh process, as a :class:`Measurement`;
- :func:`apply` and :func:`apply_generation`: compile a model (or its ``generate``) as a
  strategy or an exported file says; :func:`load_plugin`: an exported file as Accelerate's
  ``TorchDynamoPlugin``; :func:`generation_config`: one as transformers' ``GenerationConfig``;
  :func:`continuous_batching_config`: one as its ``ContinuousBatchingConfig``;
- :class:`AutotuneError` (every error autotune reports; :class:`ConfigError` for bad input) and
  :class:`AutotuneWarning` (every warning; :class:`CacheWarning` for an artefact not loaded).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from autotune.errors import (
    AutotuneError,
    AutotuneWarning,
    CacheWarning,
    ConfigError,
    NotApplicable,
)

if TYPE_CHECKING:
    from autotune.catalog import ModelRef
    from autotune.job.local import tune
    from autotune.job.tuning import Tuned, Tuning
    from autotune.ship.apply import (
        apply,
        apply_generation,
        continuous_batching_config,
        generation_config,
        load_plugin,
    )
    from autotune.ship.study import load_study
    from autotune.strategy import Strategy
    from autotune.trial.measurement import Measurement
    from autotune.trial.parent import measure
    from autotune.workload import Settings, Workload

# Each name is imported where it lives on first use: a process that imports one module of
# autotune (a trial's fork server imports ``autotune.trial.child``) does not import them all
# (the job's storage and SQLAlchemy among them: a second of CPU in every fork server).
_HOMES = {
    "ModelRef": "autotune.catalog",
    "Tuned": "autotune.job.tuning",
    "Tuning": "autotune.job.tuning",
    "tune": "autotune.job.local",
    "apply": "autotune.ship.apply",
    "apply_generation": "autotune.ship.apply",
    "load_plugin": "autotune.ship.apply",
    "generation_config": "autotune.ship.apply",
    "continuous_batching_config": "autotune.ship.apply",
    "load_study": "autotune.ship.study",
    "Strategy": "autotune.strategy",
    "Measurement": "autotune.trial.measurement",
    "measure": "autotune.trial.parent",
    "Settings": "autotune.workload",
    "Workload": "autotune.workload",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


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
    "continuous_batching_config",
    "generation_config",
    "load_plugin",
    "load_study",
    "measure",
    "tune",
]
