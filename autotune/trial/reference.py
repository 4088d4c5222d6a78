"""The study's reference, from the parent's side: computed once, in a child process of its
own (its memory is its own: :mod:`autotune.trial.precise` builds it), kept by checksum on
this machine, and handed to every trial (a search stores its bytes with the study, so that every
worker judges against the same one).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import shorten
from autotune.starts import artifact
from autotune.strategy import Strategy
from autotune.trial.process import run_child
from autotune.trial.request import Request
from autotune.workload import Settings, Workload

if TYPE_CHECKING:
    from autotune.catalog import ModelRef


@dataclass(frozen=True)
class Reference:
    """A study's higher-precision reference (:mod:`autotune.trial.precise`): its file,
    kept by checksum, and its dtype; ``dtype`` "" and ``reason`` when there is none."""

    path: str | None
    dtype: str
    reason: str = ""
    sha256: str = ""

    @classmethod
    def none(cls, reason: str) -> Reference:
        return cls(None, "", reason)


def keep(data: bytes) -> Reference:
    """Keep a reference file's bytes under their checksum (a worker's copy of the study's);
    read its dtype and reason (``weights_only``: no code runs)."""
    from autotune.trial.accuracy import load_reference

    digest = artifact.sha256(data)
    path = artifact.folder() / "references" / f"{digest}.pt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    found = load_reference(str(path))
    return Reference(
        str(path) if found["dtype"] else None, found["dtype"], found["reason"], digest
    )


_REFERENCES: dict[str, Reference] = {}  # this process's, by model, workload and seed


def make(model: ModelRef, workload: Workload, settings: Settings | None = None) -> Reference:
    """Compute the reference in a fresh process of its own (its memory is its own), once per
    model, workload and seed in this process."""
    settings = settings or Settings()
    memo = json.dumps([model.to_dict(), workload.to_dict(), settings.seed], sort_keys=True)
    if memo not in _REFERENCES or not _exists(_REFERENCES[memo]):
        _REFERENCES[memo] = _compute_reference(model, workload, settings)
    return _REFERENCES[memo]


def _exists(found: Reference) -> bool:
    return found.path is None or os.path.exists(found.path)


def _compute_reference(model: ModelRef, workload: Workload, settings: Settings) -> Reference:
    work = tempfile.mkdtemp(prefix="autotune-reference-")
    try:
        out = os.path.join(work, "reference.pt")
        request = Request("reference", Strategy("none"), model, workload, seed=settings.seed,
                          reference_out=out)  # fmt: skip
        m = run_child(request, work, "reference", os.path.join(work, "caches"), settings)
        if not m.ok or not os.path.exists(out):
            return Reference.none(
                f"no reference: computing it {m.status} ({shorten(m.reason, 300)})"
            )
        return keep(Path(out).read_bytes())
    finally:
        shutil.rmtree(work, ignore_errors=True)
