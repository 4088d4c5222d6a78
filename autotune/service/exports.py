"""Exports over HTTP: a study's chosen config in a format, as ``autotune export`` writes it but
without writing anything (a GET changes nothing stored), and the chosen strategy's cache
artefact as a download, where this machine kept it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from autotune.choice import objectives
from autotune.errors import AutotuneError, ConfigError, StorageError
from autotune.fields import parse_memory
from autotune.search import studies
from autotune.service.problems import Refused
from autotune.ship import export
from autotune.ship.study import StudyView
from autotune.starts import artifact
from autotune.storage import Store

SHA256 = re.compile(r"[0-9a-f]{64}")
MEDIA = {"accelerate-yaml": "application/yaml"}


def _policy(store: Store, study: str, policy: str | None) -> str:
    row = studies.study(store, study)
    if row is None:
        raise Refused(404, f"no study named {study!r}")
    chosen = policy or row.spec.policy
    objectives.parse_policy(chosen)
    return chosen


def document(
    store: Store, study: str, policy: str | None, fmt: str, max_memory: str | None
) -> tuple[str, str]:
    """The export's text and media type; a JSON one with what a start costs and the cache
    artefact's record, named ``best.cache.bin`` as ``autotune export`` ships it."""
    chosen_policy = _policy(store, study, policy)
    try:
        text, chosen, _ = export.document(store, study, chosen_policy, fmt,
                                          parse_memory(max_memory), merge=False)  # fmt: skip
    except (ConfigError, StorageError):
        raise
    except AutotuneError as exc:  # nothing the policy may pick (yet)
        raise Refused(404, f"study {study!r}: {exc}") from None
    if fmt == "accelerate-yaml":
        return text, MEDIA[fmt]
    data = json.loads(text)
    costs, meta = export.starts(store, study, chosen.key)
    if costs:
        data["autotune"]["start_s"] = costs
    if meta and _kept(meta) is not None:
        data["autotune"]["cache_artifact"] = {
            "file": f"best{artifact.SUFFIX}", "sha256": meta["sha256"], "bytes": meta.get("bytes"),
            "fingerprint": meta.get("fingerprint", {}),
            "download": f"/api/studies/{study}/artifact?policy={chosen_policy}",
        }  # fmt: skip
    return json.dumps(data, indent=2) + "\n", "application/json"


def _kept(meta: dict) -> Path | None:
    """Where this machine keeps an artefact (never a path a stored record could steer)."""
    digest = meta.get("sha256")
    if not isinstance(digest, str) or not SHA256.fullmatch(digest):
        return None
    path = artifact.folder() / f"{digest}{artifact.SUFFIX}"
    return path if path.is_file() else None


def artefact_path(store: Store, study: str, policy: str | None) -> tuple[Path, str]:
    """The kept artefact of the study's pick under ``policy``, and its checksum."""
    chosen_policy = _policy(store, study, policy)
    try:
        told = StudyView.of(store, study).answer(chosen_policy)
    except (ConfigError, StorageError):
        raise
    except AutotuneError as exc:
        raise Refused(404, f"study {study!r} has no pick yet: {exc}") from None
    _, meta = export.starts(store, study, told.chosen.key)
    path = _kept(meta) if meta else None
    if path is None:
        why = "has no cache artefact" if not meta else "has an artefact not kept on this machine"
        raise Refused(404, f"the pick of study {study!r}, {told.chosen.key}, {why}")
    return path, meta["sha256"]
