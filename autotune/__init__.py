"""autotune: how should I torch.compile this model, on this machine?

Public API: :class:`Strategy`, :class:`Measurement`, :func:`measure` (one strategy, cold, in a
fresh process) and :func:`apply` (compile a model as a strategy says).
"""

from __future__ import annotations

from autotune.compile import apply
from autotune.errors import AutotuneError, ConfigError, NotApplicable
from autotune.measurement import Measurement
from autotune.runner import Settings, measure
from autotune.strategy import Strategy
from autotune.workload import Workload

__all__ = [
    "AutotuneError",
    "ConfigError",
    "Measurement",
    "NotApplicable",
    "Settings",
    "Strategy",
    "Workload",
    "apply",
    "measure",
]
