"""Claims: how workers take strategies, store what they measured, adopt measurements that no
trial holds, and reap the trials of workers that went silent. Every read and write goes through
the study's :class:`autotune.storage.ledger.Ledger`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError

from autotune.coordination import liveness
from autotune.coordination.liveness import Pulse
from autotune.storage import Claim, Store, resilient

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class Tally:
    """A study's strategies (among the keys asked about): ``settled`` (a measurement is stored,
    measured or deduced), ``deduced`` (settled without measuring), ``unadopted`` (stored, but no
    trial's yet) and ``claimed`` (settled, or being measured). :attr:`measured` and
    :attr:`spent` are what the budget counts."""

    settled: frozenset[str]
    unadopted: frozenset[str]
    claimed: frozenset[str]
    stale: tuple[Claim, ...] = ()  # others' claims silent for $AUTOTUNE_GRACE_S
    numbers: frozenset[int] = frozenset()  # the trials that hold a claim
    deduced: frozenset[str] = frozenset()
    live: frozenset[str] = frozenset()  # being measured: its worker beat within $AUTOTUNE_GRACE_S

    @property
    def measured(self) -> frozenset[str]:
        """Strategies measured by a trial (not deduced)."""
        return self.settled - self.deduced

    @property
    def spent(self) -> int:
        """Strategies measured or being measured: what the trial budget counts."""
        return len(self.claimed - self.deduced)


class Coordinator:
    """One worker's handle on what the workers of a study share."""

    def __init__(self, store: Store, study: str, worker: str) -> None:
        self.store, self.study_name, self.worker = store, study, worker
        self.pulse = Pulse(self)
        self._suspects: dict[int, float] = {}  # running trials with no claim, first seen
        self._looked = 0.0  # when the running trials were last read (that read is not cheap)

    @property
    def retry(self) -> bool:  # for @resilient: the store's one flag
        return self.store.retry

    @property
    def url(self) -> str:
        return self.store.url

    # claims
    @resilient
    def claim(self, key: str, trial_number: int | None, budget: int, counted: set[str]) -> str:
        """Take ``key``: ``claimed``, ``taken`` (by another) or ``budget`` (spent)."""
        with self.store.ledger(self.study_name, lock=True) as ledger:
            held = {c.key: c for c in ledger.claims()}
            mine = held.get(key)
            if mine is not None:  # ours, if a retried commit had landed
                ours = mine.worker == self.worker and mine.trial_number == trial_number
                return "claimed" if ours else "taken"
            if len(held.keys() & counted) >= budget and key in counted:
                return "budget"
            ledger.add_claim(key, trial_number, self.worker, beating=True)
        return "claimed"

    @resilient
    def record(
        self, key: str, trial_number: int | None, payload: dict[str, Any],
        deduced_from: str | None = None,
    ) -> str:  # fmt: skip
        """Store this worker's measurement of ``key``: ``stored`` (as its trial's),
        ``unadopted`` (its claim was reaped: kept for a later trial to adopt) or ``duplicate``
        (another worker's is stored; this one is dropped)."""
        try:
            with self.store.ledger(self.study_name, lock=True) as ledger:
                found = ledger.measurement(key)
                if found is not None:  # another's, or ours if a retried commit had landed
                    if found.worker != self.worker:
                        return "duplicate"
                    return "stored" if found.trial_number == trial_number else "unadopted"
                claim = ledger.claim(key)
                ours = claim is not None and claim.worker == self.worker
                if claim is None:  # reaped: hold it again, so nobody measures it anew
                    ledger.add_claim(key, None, self.worker, beating=False)
                mine = ours and claim is not None and claim.trial_number == trial_number
                number = trial_number if mine else None
                ledger.add_measurement(key, number, payload, self.worker, deduced_from)
                return "stored" if number is not None or trial_number is None else "unadopted"
        except IntegrityError:  # a peer's insert won the unique key first
            return "duplicate"

    @resilient
    def done(self, key: str) -> None:
        """The claim's trial is told: its heartbeat stops."""
        with self.store.ledger(self.study_name) as ledger:
            ledger.stop_beating(key, self.worker)

    @resilient
    def release(self, key: str) -> None:
        """Give back this worker's claim on an unmeasured strategy (an interrupted trial)."""
        with self.store.ledger(self.study_name, lock=True) as ledger:
            if ledger.measurement(key) is None:
                ledger.delete_claims(key, self.worker)

    @resilient
    def adopt(self, key: str, trial_number: int) -> bool:
        """Make a measurement with no trial this trial's, atomically: of several workers asking
        at once, exactly one gets True."""
        with self.store.ledger(self.study_name) as ledger:
            return ledger.set_trial_number(key, trial_number, was=None) == 1

    @resilient
    def unadopt(self, key: str, trial_number: int) -> None:
        """The trial of a stored measurement was failed (by a reaper): free it for adoption."""
        with self.store.ledger(self.study_name) as ledger:
            ledger.set_trial_number(key, None, was=trial_number)

    @resilient
    def tally(self, keys: set[str]) -> Tally:
        """What is settled, unadopted and claimed among ``keys``, and which claims are silent:
        two small queries (the claims come with the database's clock)."""
        with self.store.ledger(self.study_name) as ledger:
            rows = ledger.measurement_states()
            claims, now = ledger.claims_and_now()
        silent = now - liveness.grace_s()
        stale = tuple(c for c in claims if c.worker != self.worker
                      and c.heartbeat is not None and c.heartbeat < silent)  # fmt: skip
        settled = {k for k, _, _ in rows} & keys
        unadopted = {k for k, n, _ in rows if n is None} & keys
        deduced = {k for k, _, d in rows if d is not None} & keys
        claimed = ({c.key for c in claims} & keys) | settled
        numbers = frozenset(c.trial_number for c in claims if c.trial_number is not None)
        live = {c.key for c in claims if c.heartbeat is not None and c.heartbeat >= silent}
        return Tally(frozenset(settled), frozenset(unadopted), frozenset(claimed), stale,
                     numbers, frozenset(deduced), frozenset((live & keys) - settled))  # fmt: skip

    @resilient
    def forget_failed_baseline(self) -> str | None:
        """Delete a failed eager baseline that no trial adopted (a timeout, OOM or crash is
        retried on resume); return its reason, or None when there was none."""
        with self.store.ledger(self.study_name, lock=True) as ledger:
            row = ledger.measurement("none")
            if row is None or row.status == "ok" or row.trial_number is not None:
                return None
            ledger.delete_measurement("none")
            ledger.delete_claims("none")
            return f"{row.status}: {row.payload.get('reason', '')}".strip()

    # liveness
    def beat(self) -> int:
        """Renew the heartbeat of this worker's claims in flight; how many there are. One try:
        the pulse beats again soon, and must see an outage as one."""
        with self.store.ledger(self.study_name) as ledger:
            return ledger.beat(self.worker)

    @resilient
    def live_workers(self) -> int:
        """Workers measuring right now: those with a claim beaten within
        ``$AUTOTUNE_GRACE_S`` (:func:`~autotune.variables.grace_s`, 30 s by default)."""
        with self.store.ledger(self.study_name) as ledger:
            return len(ledger.live_workers(liveness.grace_s()))

    # reaping
    def reap(self, study: optuna.Study, tally: Tally, own: set[int] | None = None) -> int:
        """Fail the trials of workers silent for ``$AUTOTUNE_GRACE_S`` (as ``tally`` saw them)
        and hand their strategies back; also fail running trials that never claimed a strategy
        (a worker that died between asking and claiming). Returns how many trials it ended."""
        if not self.pulse.steady():
            return 0
        ended = 0
        for claim in tally.stale:
            told = False
            if claim.trial_number is not None:
                told = _fail(study, claim.trial_number) == "COMPLETE"
                ended += not told
            self._reclaim(claim, told)
        ended += self._orphans(study, set(tally.numbers) | (own or set()))
        return ended

    @resilient
    def _reclaim(self, claim: Claim, told: bool) -> None:
        """Hand a dead worker's strategy back (or, if it was measured, keep the measurement
        for adoption): only if the claim is still silent, checked under the study's lock."""
        with self.store.ledger(self.study_name, lock=True) as ledger:
            found = ledger.measurement(claim.key)
            if not ledger.settle_silent(claim.id, liveness.grace_s(), keep=found is not None):
                return
            number = claim.trial_number
            if found is not None and not told and number is not None:
                ledger.set_trial_number(claim.key, None, was=number)  # a later trial adopts it

    def clean(self, study: optuna.Study) -> int:
        """At a start with no live worker on the study: fail every RUNNING trial (a run that
        died, or a disk that filled, left it); how many. Their claims, if any, are silent and
        are reaped as usual."""
        from optuna.trial import TrialState

        if self.live_workers():
            return 0
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return sum(_fail(study, t.number) == "FAIL" for t in running)

    def fail_unclaimed(self, study: optuna.Study, claimed: set[int]) -> int:
        """When a worker stops with the study done (budget or space spent): fail the RUNNING
        trials that no claim holds (asked, never claimed: an ask whose answer an outage
        swallowed, so its worker asked again), without a grace period, as nothing will claim
        them now; how many. A peer still holding one fails it itself (skip_if_finished)."""
        from optuna.trial import TrialState

        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return sum(_fail(study, t.number) == "FAIL" for t in running if t.number not in claimed)

    def _orphans(self, study: optuna.Study, claimed: set[int]) -> int:
        from optuna.trial import TrialState

        now = time.monotonic()
        if now - self._looked < liveness.grace_s() / 2:
            return 0
        self._looked = now
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        seen = {t.number for t in running if t.number not in claimed}
        self._suspects = {n: self._suspects.get(n, now) for n in seen}
        ended = 0
        for number, since in self._suspects.items():
            if now - since >= liveness.grace_s():
                ended += _fail(study, number) == "FAIL"
        return ended


def _fail(study: optuna.Study, number: int) -> str:
    """Fail a trial unless it has ended; the state it ends in (``FAIL`` when it was running).
    Its worker, or a peer's reaper, may end it between Optuna's check and this write: then
    ``COMPLETE`` if its worker told it, else ``ENDED`` (a peer failed it)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    try:
        return study.tell(number, state=TrialState.FAIL, skip_if_finished=True).state.name
    except UpdateFinishedTrialError:
        ended = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        return "COMPLETE" if any(t.number == number for t in ended) else "ENDED"
