"""What the service shows of a storage: each study's summary (the index), and one study with
its trials and Pareto front. Plain dicts of JSON values, read through the store and the same
selection and verdict as every command (:func:`autotune.choice.verdict.answer`)."""

from __future__ import annotations

import math
from typing import Any

from autotune.choice.verdict import Answer
from autotune.coordination import grace_s
from autotune.errors import AutotuneError, shorten
from autotune.search import studies
from autotune.search.overview import counts
from autotune.search.studies import StudyRecord
from autotune.service.problems import Refused
from autotune.ship.study import StudyView
from autotune.storage import Store, Stored
from autotune.workload import describe


def finite(value: Any) -> float | None:
    """A number JSON can carry (None for a missing, infinite or NaN one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def clean(value: Any) -> Any:
    """A JSON value with every infinite or NaN number replaced by None."""
    if isinstance(value, float):
        return finite(value)
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def study_answer(store: Store, study: StudyRecord, rows: list[Stored]) -> Answer | None:
    """The study's current pick under its policy (confirmed where it was), or None."""
    try:
        return StudyView(store, study, rows).answer()
    except AutotuneError:  # no baseline yet, or nothing the policy may pick
        return None


def pick(told: Answer | None) -> dict[str, Any] | None:
    if told is None:
        return None
    p = told.chosen
    return {"key": p.key, "speedup": finite(p.speedup), "compile_s": finite(p.compile_s),
            "latency_ms": finite(p.latency_ms), "confirmed": told.confirmation is not None,
            "verdict": told.sentence}  # fmt: skip


def summary(store: Store, study: StudyRecord) -> dict[str, Any]:
    """One study as the index shows it (live workers are added per request)."""
    rows = store.measurements(study.name)
    spec, env = study.spec, study.environment or {}
    runs = store.runs(study.name)
    times = [r.created_at for r in rows] + [r.started_at for r in runs] + [study.created_at]
    last = max((t for t in times if t is not None), default=None)
    tally = counts(spec, rows)
    budget = spec.trials
    exported = store.latest_export(study.name) is not None
    return {
        "study": study.name,
        "model": spec.model.name,
        "layers": spec.model.layers,
        "workload": describe(spec.workload),
        "device": str(env.get("device") or spec.workload.device),
        "device_name": env.get("device_name"),
        "torch": env.get("torch"),
        **tally,
        "budget": budget,
        "runs": len(runs),
        "live_workers": 0,
        "pick": pick(study_answer(store, study, rows)),
        "exported": exported,
        "done": exported or (budget is not None and tally["measured"] >= budget),
        "last": last.isoformat(timespec="seconds") if last else None,
    }


def summaries(store: Store) -> list[dict[str, Any]]:
    """Every study in the storage, oldest first."""
    return [summary(store, s) for s in studies.studies(store)]


def with_live(rows: list[dict[str, Any]], store: Store) -> list[dict[str, Any]]:
    """The summaries with the workers measuring right now (one query for every study)."""
    live = store.live_workers(grace_s())
    return [{**r, "live_workers": live.get(r["study"], 0)} for r in rows]


def trial_row(row: Stored) -> dict[str, Any]:
    payload = row.payload or {}
    latency = payload.get("latency") if isinstance(payload.get("latency"), dict) else {}
    reason = str(payload.get("reason") or "").strip()
    return {"key": row.key, "trial_number": row.trial_number, "status": row.status,
            "deduced_from": row.deduced_from, "compile_s": finite(payload.get("compile_s")),
            "latency_ms": finite(latency.get("median_ms")),
            "speedup": finite(payload.get("speedup")),
            "reason": shorten(reason.splitlines()[0], 300) if reason else ""}  # fmt: skip


def detail(store: Store, name: str) -> dict[str, Any]:
    """One study: its summary, spec, environment, every stored strategy and the front."""
    study = studies.study(store, name)
    if study is None:
        raise Refused(404, f"no study named {name!r}")
    rows = store.measurements(name)
    told = study_answer(store, study, rows)
    front = [{"key": p.key, "compile_s": finite(p.compile_s), "latency_ms": finite(p.latency_ms),
              "speedup": finite(p.speedup), "memory_mb": finite(p.memory_mb),
              "trial_number": p.trial_number} for p in (told.front if told else [])]  # fmt: skip
    return {
        **summary(store, study), "policy": study.spec.policy,
        "spec": clean(study.spec.to_dict()), "environment": clean(study.environment),
        "trials": [trial_row(r) for r in rows], "front": front,
        "excluded": clean(told.excluded) if told else None,
    }  # fmt: skip
