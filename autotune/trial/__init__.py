"""Stage 3, one strategy measured: the parent (:mod:`.parent`, :func:`measure`) spawns a fresh
child process (:mod:`.process`, :mod:`.child`) for a :class:`Request` (:mod:`.request`); the
child runs a scenario (:mod:`.scenarios`) and times it (:mod:`.timing`), checks it against the
study's :class:`Reference` (:mod:`.reference`, :mod:`.accuracy`), reads Dynamo's records
(:mod:`.metrics`, :mod:`.recompiles`) and answers with a :class:`Measurement`
(:mod:`.measurement`). Two procedures run in a child beside the scenarios: the confirmation's
interleaved rounds (:mod:`.rounds`) and the study's higher-precision reference
(:mod:`.precise`)."""

from __future__ import annotations

from autotune.trial.measurement import Measurement
from autotune.trial.parent import measure
from autotune.trial.reference import Reference
from autotune.trial.request import Request

__all__ = ["Measurement", "Reference", "Request", "measure"]
