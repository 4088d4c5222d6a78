"""A search goes back to its trials after a confirmation that ruled its candidates out with time
left (autotune/job/tuning.py), and its answer keeps both confirmations: real trials of a toy
model in fresh processes, a real SQLite study."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any

import pytest

from autotune.choice.confirm import Confirmation
from autotune.job.tuning import Tuning
from autotune.search.state import Lines
from autotune.ship.study import StudyView
from tests.helpers import fast_spec


def confirm_pick(*args: Any, **kwargs: Any) -> Any:
    """The confirmation as this change made it (it returns what it stored, and takes the one
    ``before`` it), found when a test runs."""
    return importlib.import_module("autotune.job.tuning").confirm_pick(*args, **kwargs)


class Heard(Lines):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, line: str) -> None:
        self.notes.append(line)


def stopped_for_time(tmp_path: Path) -> tuple[Tuning, str]:
    """A budgeted search of toy-64 over the replaying backends that measured one compiled
    strategy and stopped (as its time budget stops one), an hour of budget left; the key it
    measured."""
    spec = fast_spec(trials=3, time_budget="1h", granularity="full", dynamic="none",
                     fullgraph="false", iters=6)  # fmt: skip
    tuning = Tuning.open(spec, f"sqlite:///{tmp_path}/t.db")
    done = tuning.run(Lines(), max_measure=1)
    assert done.measured_here == 1
    tuning.outcome = dataclasses.replace(done, stopped="time")  # as the budget stops a search
    keys = [r.key for r in tuning.search.store.measurements(tuning.name) if r.key != "none"]
    assert len(keys) == 1
    return tuning, keys[0]


def ruled_out(key: str, status: str = "ok", pick: str = "none") -> Confirmation:
    """What a confirmation that timed ``key`` against eager and did not show it faster says."""
    return Confirmation("none", pick, 6, 3.0, [f"not shown: {key} beat eager in 2 of 6 rounds"],
                        status, latency_ms={"none": 10.0, key: 10.0},
                        speedup={key: 1.01})  # fmt: skip


def test_a_search_whose_confirmation_ruled_its_candidates_out_goes_back_to_its_trials(
    tmp_path: Path,
) -> None:
    tuning, first = stopped_for_time(tmp_path)
    search = tuning.search
    search.plan.candidates = 1  # the trial's rounds put it faster: a candidate
    heard = Heard()
    assert tuning.back(ruled_out(first), heard)
    assert search.plan.candidates == 0  # nothing is kept to confirm it again
    assert heard.notes and "back to the trials" in heard.notes[0], heard.notes
    assert tuning.outcome is not None and tuning.outcome.measured_here >= 2
    keys = {r.key for r in search.store.measurements(tuning.name) if r.key != "none"}
    assert first in keys and len(keys) >= 2, keys

    result = confirm_pick(search, None, before=ruled_out(first))
    assert result.lines[0].startswith(f"not shown: {first}")
    assert any(line.startswith("back to the trials") for line in result.lines), result.lines
    assert result.latency_ms[first] == 10.0  # what the first confirmation showed, kept
    view = StudyView.of(search.store, tuning.name)
    answer = view.answer()
    assert answer.confirmation is not None, "the stored confirmation decides the answer"
    assert answer.chosen.key == result.pick
    assert answer.chosen.key != first  # never the one the first confirmation ruled out


@pytest.mark.parametrize("how", ["confirmed", "unconfirmed", "not stopped for time", "workers"])
def test_a_search_does_not_go_back_where_its_confirmation_decided_or_the_budget_did_not_stop_it(
    tmp_path: Path,
    how: str,
) -> None:
    tuning, first = stopped_for_time(tmp_path)
    tuning.search.plan.candidates = 1
    confirmed = ruled_out(first)
    if how == "confirmed":  # the rounds showed it faster: the pick
        confirmed = ruled_out(first, pick=first)
    elif how == "unconfirmed":  # the budget left it standing on its trial's rounds
        confirmed = ruled_out(first, status="unconfirmed", pick=first)
    elif how == "not stopped for time":
        assert tuning.outcome is not None
        tuning.outcome = dataclasses.replace(tuning.outcome, stopped="budget")
    else:
        from autotune.job.local import LocalTuning

        tuning = LocalTuning(tuning.search, workers=2)
        tuning.outcome = _outcome(tuning)
    measured = len(tuning.search.store.measurements(tuning.name))
    assert not tuning.back(confirmed, Heard())
    assert len(tuning.search.store.measurements(tuning.name)) == measured
    assert tuning.search.plan.candidates == 1


def test_a_search_does_not_go_back_where_no_trial_fits_what_is_left(tmp_path: Path) -> None:
    tuning, first = stopped_for_time(tmp_path)
    plan = tuning.search.plan
    plan.candidates = 1
    plan.started -= plan.budget_s or 0.0  # the budget is spent
    assert not tuning.back(ruled_out(first), Heard())
    assert len(tuning.search.store.measurements(tuning.name)) == 2  # eager and the one trial


def _outcome(tuning: Tuning) -> Any:
    from autotune.search.loop import outcome

    return outcome(tuning.search, 1, 0, "time")
