"""Scenarios: how each workload's trial runs, on one skeleton (:mod:`.base`).

- :class:`Inference`: a no-grad forward;
- :class:`Train`: forward, backward and an optimizer step;
- :class:`Generate`: a prefill, then greedy decode steps against a static KV cache.
"""

from __future__ import annotations

from autotune.trial.scenarios.base import Scenario, TrialContext, begin
from autotune.trial.scenarios.generate import Generate
from autotune.trial.scenarios.inference import Inference, Train

__all__ = ["Generate", "Inference", "Scenario", "Train", "TrialContext", "begin"]
