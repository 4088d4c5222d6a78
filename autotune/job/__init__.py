"""Stage 7, the whole job: search -> confirm -> export as one library object, and the processes
that run it.

- :mod:`.tuning`: one tuning run in this process (:class:`Tuning`: open or join, run with a
  listener, finish), what every front end runs;
- :mod:`.local`: a tuning run on this machine (:class:`LocalTuning`), in this process or in
  ``search --workers K``'s worker processes (:class:`LocalWorkers`, each running
  :mod:`.spawned`), and :func:`tune`, what ``autotune search`` runs too;
- :mod:`.study_worker`: one study's worker (:func:`work`); :mod:`.worker`: the queue's worker
  (:func:`work_queue`), which finishes each study it ends as a :class:`Tuning`;
- :mod:`.queue`: which study a queue worker takes next (:class:`Queue`);
- :mod:`.exits`: how a process ends (one line for an error, 130 when interrupted).
"""

from __future__ import annotations

from autotune.job.local import LocalTuning, LocalWorkers, tune
from autotune.job.queue import Queue
from autotune.job.study_worker import work
from autotune.job.tuning import Tuned, Tuning
from autotune.job.worker import Shift, work_queue

__all__ = [
    "LocalTuning",
    "LocalWorkers",
    "Queue",
    "Shift",
    "Tuned",
    "Tuning",
    "tune",
    "work",
    "work_queue",
]
