"""Stage 7, the whole job: search -> confirm -> export as one library object, and the processes
that run it.

- :mod:`.tuning`: one tuning run (:class:`Tuning`: open, run with a listener, finish) and
  :func:`tune`, what ``autotune search`` and every queue worker run;
- :mod:`.local`: ``search --workers K``'s worker processes on this machine
  (:class:`LocalWorkers`), each running :mod:`.spawned`;
- :mod:`.study_worker`: one study's worker (:func:`work`); :mod:`.worker`: the queue's worker
  (:func:`work_queue`), which finishes each study it ends as a :class:`Tuning`;
- :mod:`.queue`: which study a queue worker takes next (:class:`Queue`);
- :mod:`.exits`: how a process ends (one line for an error, 130 when interrupted).
"""

from __future__ import annotations

from autotune.job.local import LocalWorkers
from autotune.job.queue import Queue
from autotune.job.study_worker import work
from autotune.job.tuning import Tuned, Tuning, tune
from autotune.job.worker import Shift, work_queue

__all__ = ["LocalWorkers", "Queue", "Shift", "Tuned", "Tuning", "tune", "work", "work_queue"]
