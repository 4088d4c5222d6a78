"""What a study shows of its progress, after a run and while it runs: its measured and deduced
strategies (``counts``), and every study in a storage with its progress (``overview``: ``autotune
studies``, the service).

"Measured" means one thing everywhere: a strategy of the study's space measured by a trial
(not deduced from another's). The eager baseline counts when eager is in the space.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from autotune.coordination import Coordinator
from autotune.errors import ConfigError
from autotune.search.spec import StudySpec
from autotune.search.studies import studies
from autotune.storage import Store, Stored


def counts(spec: StudySpec | None, rows: Iterable[Stored]) -> dict[str, int]:
    """A study's ``measured`` (by a trial, of its space) and ``deduced`` strategies, and of
    the measured ones how many ran ``ok`` and how many ``failed`` (``spec`` None: one that
    cannot be read, every strategy measured counted)."""
    eager_counts = spec is None or "none" in spec.space.granularity  # measured either way
    measured = [r for r in rows if r.measured and (eager_counts or r.key != "none")]
    deduced = [r for r in rows if not r.measured]
    ok = sum(r.status == "ok" for r in measured)
    return {"measured": len(measured), "deduced": len(deduced), "ok": ok,
            "failed": len(measured) - ok}  # fmt: skip


def overview(store: Store) -> list[dict[str, Any]]:
    """Every study in the storage with its progress: measured strategies against the budget,
    and those deduced without measuring."""
    table = []
    for study in studies(store):
        rows = store.measurements(study.name)
        last = max((r.created_at for r in rows if r.created_at), default=study.created_at)
        try:
            spec: StudySpec | None = study.spec
        except ConfigError:  # listed all the same: where it is read, it says what is wrong
            spec = None
        table.append({
            "study": study.name,
            "model": spec.model.name if spec else None,
            **counts(spec, rows),
            "budget": spec.trials if spec else None,
            "runs": len(store.runs(study.name)),
            "live workers": Coordinator(store, study.name, "").live_workers(),
            "last": last.isoformat(timespec="seconds") if last else "",
        })  # fmt: skip
    return table
