"""Which model is measured: a preset (:mod:`.presets`), a local transformers directory
(:mod:`.hf`), or a user's function (:mod:`.user`); the toy models (:mod:`.toy`).

A :class:`ModelRef` names one (:mod:`.models`): ``check`` validates it cheaply in the parent
process; ``build`` makes the model and its example inputs, deterministically, in whichever
process measures it.
"""

from __future__ import annotations

from autotune.catalog.models import ModelRef, build, check, inputs_at, kind
from autotune.catalog.presets import presets

__all__ = ["ModelRef", "build", "check", "inputs_at", "kind", "presets"]
