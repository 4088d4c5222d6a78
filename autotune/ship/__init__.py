"""Stage 6, what leaves: each format's fields for a strategy (:mod:`.formats`: Accelerate,
torch.compile, transformers), a study's choice written in one (:mod:`.export`), an exported file
read on the machine that uses it (:mod:`.exported`), applied to a model (:mod:`.apply`:
``apply``, :func:`apply_generation`, :func:`load_plugin`), and a preflight of the artefacts it
ships (:mod:`.preflight`: a :class:`Fit` each).

A function named as its module (``export.export``, ``apply.apply``, ``preflight.preflight``) is
reached through the module (``apply`` also as :func:`autotune.apply`): re-exported here, it
would hide it."""

from __future__ import annotations

from autotune.ship.apply import apply_generation, load_plugin
from autotune.ship.preflight import Fit

__all__ = ["Fit", "apply_generation", "load_plugin"]
