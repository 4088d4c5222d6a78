"""One study's worker (autotune/job/study_worker.py): a joined Tuning, run."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_a_study_s_worker_runs_a_joined_tuning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``autotune worker`` and each of ``search --workers K``'s processes run the study as a
    :class:`Tuning` joined to it, as the queue's worker does: its plan, from the join, stops it
    at the study's budget (1 s: no trial fits)."""
    from autotune.job import study_worker
    from autotune.job.tuning import Tuning
    from autotune.search import submit
    from tests.helpers import fast_spec

    url = f"sqlite:///{tmp_path}/w.db"
    submit(fast_spec(trials=2, time_budget="1s", study="w"), url)
    ran: list[Tuning] = []
    run = Tuning.run

    def spied(self: Tuning, *args, **kwargs):  # type: ignore[no-untyped-def]
        ran.append(self)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(Tuning, "run", spied)
    outcome = study_worker.work("w", url)
    assert [t.name for t in ran] == ["w"] and type(ran[0]) is Tuning
    assert ran[0].search.plan.budget_s == 1.0 and ran[0].outcome is outcome
    assert outcome.stopped == "time" and outcome.measured_here == 0
    assert "stopped: time" in capsys.readouterr().out
