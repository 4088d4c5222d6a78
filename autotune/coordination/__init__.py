"""Coordination: what the processes that share a study agree on through its database.

- **Claims.** A worker takes a strategy before measuring it, in one transaction with the check
  of the study's budget; a retried commit recognises its own claim.
- **Liveness.** A claim in flight carries a heartbeat, the database clock's time of its
  worker's last beat (:class:`Pulse`, every ``$AUTOTUNE_HEARTBEAT_S``: :func:`heartbeat_s`,
  5 s by default).
- **Reaping.** A claim silent for ``$AUTOTUNE_GRACE_S`` (:func:`grace_s`, 30 s by default)
  belongs to a dead, frozen or cut-off worker: a live worker fails its trial through Optuna's
  public ``tell`` and hands the strategy back. A worker reaps only after it has itself reached
  the database for that long in a row, so a database outage, which silences everyone, reaps no
  one.
- **Adoption.** A measurement stored without a live trial (the eager baseline, measured before
  any trial, or the result of a worker that came back after its trial was failed) is adopted
  by exactly one later trial, so every measurement ends as one COMPLETE trial.
- **Machines.** A machine joins a study only where its hardware and torch agree with the
  study's.

Modules: :mod:`.claims` (claims, adoption, reaping), :mod:`.liveness` (heartbeats),
:mod:`.machines` (whether a machine may join a study). The processes themselves (local workers,
a queue's worker) are the job's (:mod:`autotune.job`).
"""

from __future__ import annotations

from autotune.coordination.claims import Coordinator, Tally
from autotune.coordination.liveness import Pulse, grace_s, heartbeat_s, reap_s
from autotune.coordination.machines import check_environment, comparable

__all__ = [
    "Coordinator",
    "Pulse",
    "Tally",
    "check_environment",
    "comparable",
    "grace_s",
    "heartbeat_s",
    "reap_s",
]
