"""The lookup: the best known compile config for a model, a workload, a device (kind and name)
and a torch version, as a deploy pipeline or a CI job asks for it.

Among the studies that match, a study's latest export wins (a worker serving the queue
confirms and exports each study it finishes; ``autotune search`` and ``autotune export`` record
theirs): the newest such one. Where no matching study has an export yet, the best measured so
far answers, marked ``exported: false``. None when no matching study has a pick.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from autotune.errors import AutotuneError
from autotune.search import studies
from autotune.search.studies import StudyRecord
from autotune.storage import Store


@dataclass(frozen=True)
class Query:
    """What a lookup asks for. ``layers`` None is the whole model; ``device`` is ``cpu`` or
    ``cuda``; ``device_name`` and ``torch`` None match any (``2.13.0`` matches every local
    build of it, ``2.13.0+cu128`` only that one)."""

    model: str
    device: str
    layers: int | None = None
    kind: str = "inference"
    batch_size: int = 1
    seq_len: int = 32
    dtype: str = "float32"
    new_tokens: int = 32
    device_name: str | None = None
    torch: str | None = None

    def describe(self) -> str:
        layers = f" ({self.layers} layers)" if self.layers else ""
        on = f"{self.device} {self.device_name or ''}".strip()
        with_torch = f", torch {self.torch}" if self.torch else ""
        return (f"{self.model}{layers}, {self.kind} batch {self.batch_size} seq {self.seq_len} "
                f"{self.dtype}, on {on}{with_torch}")  # fmt: skip


def torch_matches(have: Any, want: str) -> bool:
    have = str(have or "")
    return have == want or ("+" not in want and have.partition("+")[0] == want)


def matches(study: StudyRecord, q: Query) -> bool:
    """Whether a study measured what ``q`` asks about."""
    spec, env = study.spec, study.environment or {}
    if (spec.model.name, spec.model.layers) != (q.model, q.layers):
        return False
    w = spec.workload
    if (w.kind, w.batch_size, w.seq_len, w.dtype) != (q.kind, q.batch_size, q.seq_len, q.dtype):
        return False
    if q.kind == "generate" and w.new_tokens != q.new_tokens:
        return False
    if str(env.get("device") or "").partition(":")[0] != q.device:
        return False
    name = str(env.get("device_name") or "")
    if q.device_name is not None and name.casefold() != q.device_name.casefold():
        return False
    return q.torch is None or torch_matches(env.get("torch"), q.torch)


def lookup(store: Store, q: Query) -> dict[str, Any] | None:
    """The best known config for ``q`` (see the module's docstring), or None."""
    found = [s for s in studies.studies(store) if matches(s, q)]
    exported = [(e, s) for s in found if (e := store.latest_export(s.name)) is not None]
    if exported:
        record, study = max(exported, key=lambda pair: (pair[0].exported_at is not None,
                                                        pair[0].exported_at))  # fmt: skip
        config = json.loads(record.content)
        return _answer(study, record.policy, record.key, config, exported=True)
    best = None
    for study in found:  # not exported yet: the pick so far, of the study measured most
        live = _live(store, study)
        if live is not None and (best is None or live[0] > best[0]):
            best = live
    return best[1] if best else None


def _live(store: Store, study: StudyRecord) -> tuple[int, dict[str, Any]] | None:
    from autotune.ship import export

    policy = study.spec.policy
    try:
        text, chosen, _ = export.document(store, study.name, policy, "accelerate",
                                          study.spec.max_memory_mb)  # fmt: skip
    except AutotuneError:  # no baseline yet, or nothing the policy may pick
        return None
    measured = len(store.measured_keys(study.name))
    return measured, _answer(study, policy, chosen.key, json.loads(text), exported=False)


def _answer(study: StudyRecord, policy: str, key: str, config: dict[str, Any], exported: bool
            ) -> dict[str, Any]:  # fmt: skip
    block = config.get("autotune") or {}
    return {"study": study.name, "policy": policy, "key": key, "exported": exported,
            "verdict": block.get("verdict"), "environment": study.environment or {},
            "config": config}  # fmt: skip


def artefact_fits(store: Store, answer: dict[str, Any], asker: dict[str, Any]) -> dict[str, Any]:
    """Whether each artefact of the answer's pick (the compile cache, a precompiled function,
    an AOTInductor package) would hit on the asker's machine: the fields the asker gave that
    differ from what the artefact was made with (those it did not give are not judged)."""
    from autotune.ship.preflight import fits
    from autotune.trial.measurement import Measurement

    row = store.measurement(answer["study"], answer["key"])
    if row is None:
        return {}
    m = Measurement.from_dict(row.payload)
    blocks = {"cache": m.artifact} if m.artifact else {}
    blocks.update({k: v for k, v in m.precompiled.items() if "error" not in v})
    found = {}
    for kind, block in blocks.items():
        made = {k: v for k, v in (block.get("fingerprint") or {}).items() if k in asker}
        differs = fits(made, asker)
        found[kind] = {"fits": not differs, "differs": {k: list(v) for k, v in differs.items()}}
    return found
