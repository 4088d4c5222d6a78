"""Stage 7, the whole job: search -> confirm -> export as one library object, and the processes
that run it.

- :mod:`.tuning`: one tuning run (:class:`Tuning`: open, run with a listener, finish) and
  :func:`tune`, what ``autotune search`` and every queue worker run;
- :mod:`.local`: ``search --workers K``'s worker processes on this machine
  (:class:`LocalWorkers`), each running :mod:`.spawned`;
- :mod:`.worker`: a worker, of one study (:func:`work`) or of the queue (:func:`serve`);
- :mod:`.queue`: which study a queue worker takes next (:class:`Queue`);
- :mod:`.exits`: how a process ends (one line for an error, 130 when interrupted).
"""

from __future__ import annotations

from autotune.job.local import LocalWorkers
from autotune.job.queue import Queue
from autotune.job.tuning import Tuned, Tuning, tune
from autotune.job.worker import Shift, serve, work

__all__ = ["LocalWorkers", "Queue", "Shift", "Tuned", "Tuning", "serve", "tune", "work"]
