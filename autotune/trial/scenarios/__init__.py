"""Scenarios: how each workload's trial runs, on one skeleton (:mod:`.base`).

- :class:`Inference`: a no-grad forward;
- :class:`Train`: forward, backward and an optimizer step;
- :class:`Generate`: a prefill, then greedy decode steps against a static KV cache;
- :class:`TrafficTrial`: the inference workload over a traffic of shapes;
- :class:`Generations`: the generate workload over a traffic of prompts and answers;
- :class:`Continuous`: many requests at once, continuous batching over an arrival traffic.
"""

from __future__ import annotations

from autotune.trial.scenarios.base import Scenario, TrialContext, begin
from autotune.trial.scenarios.continuous import Continuous
from autotune.trial.scenarios.generate import Generate
from autotune.trial.scenarios.generations import Generations
from autotune.trial.scenarios.inference import Inference, Train
from autotune.trial.scenarios.traffic_trial import TrafficTrial

__all__ = ["Continuous", "Generate", "Generations", "Inference", "Scenario", "TrafficTrial",
           "Train", "TrialContext", "begin"]  # fmt: skip
