"""Stage 4, from measurements to one answer: the objectives and policies (:mod:`.objectives`),
selection (pure: the scale, the sign test, the front; :mod:`.selection`: a :class:`Point` each,
:func:`choose`), the confirmation of the pick (:mod:`.confirm`: a :class:`Confirmation`) and the
verdict in words (:mod:`.verdict`: an :class:`Answer`, :func:`answer`).

A function named as its module (``confirm.confirm``, ``verdict.verdict``) is reached through the
module: re-exported here, it would hide it."""

from __future__ import annotations

from autotune.choice.confirm import Confirmation
from autotune.choice.selection import Point, choose
from autotune.choice.verdict import Answer, answer

__all__ = ["Answer", "Confirmation", "Point", "answer", "choose"]
