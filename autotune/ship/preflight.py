"""Preflight: will the artefacts an exported file ships load and hit on this machine?

Caches that silently miss on another machine are the first complaint about torch.compile's
caching (pytorch/pytorch#144859: a 3.8 GB cache copied to an identical H100 went unused). For
each artefact a ``best.json`` ships (the compile cache, a precompiled function, an AOTInductor
package) this says whether its file is there and whole, and every field of the machine it was
made on that differs here (torch, Triton, CUDA, the device's name, capability and index, the
CPU's vector ISA, the float32 matmul precision). Nothing is loaded or run: a file's bytes are
read for their checksum alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.starts import artifact


@dataclass(frozen=True)
class Fit:
    """One shipped artefact, as it would fare here."""

    kind: str  # cache, precompiled or aot
    file: str
    problem: str = ""  # missing, damaged or malformed: it cannot load at all
    differs: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # field -> (made, here)

    @property
    def hits(self) -> bool:
        return not self.problem and not self.differs

    def line(self) -> str:
        """One line for people."""
        head = f"{self.kind} artefact {self.file}: "
        if self.problem:
            return head + f"will not load: {self.problem}"
        if not self.differs:
            return head + "will load and hit here"
        why = "; ".join(f"{artifact.FIELDS[k]}: made with {made!r}, here {here!r}"
                        for k, (made, here) in self.differs.items())  # fmt: skip
        return head + f"will miss: {why}"


def shipped(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The artefact blocks an export holds, by kind."""
    block = data.get("autotune")
    if not isinstance(block, dict):
        return {}
    found = {}
    if isinstance(block.get("cache_artifact"), dict):
        found["cache"] = block["cache_artifact"]
    skipping = artifact.precompiled_blocks(block)
    found.update({k: v for k, v in skipping.items() if isinstance(v, dict)})
    return found


def fits(made: Any, here: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The fields of ``made`` (an artefact's fingerprint) that differ from ``here``."""
    return artifact.differences(made if isinstance(made, dict) else {}, here)


def preflight(path: str | Path, device: str | None = None) -> list[Fit]:
    """Every artefact the export at ``path`` ships, checked against this machine (``device``:
    the one the user's process runs on; default the kind it was made for, index 0)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is not an autotune JSON export: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("autotune"), dict):
        raise ConfigError(f"{path} is not an autotune export (no autotune block): write one "
                          "with autotune export or autotune search")  # fmt: skip
    return [_check(kind, block, path, device) for kind, block in shipped(data).items()]


def _check(kind: str, block: dict[str, Any], path: Path, device: str | None) -> Fit:
    name = block.get("file")
    if not isinstance(name, str) or Path(name).name != name:
        return Fit(kind, str(name), "the export names no file beside it")
    target = path.with_name(name)
    try:
        data = target.read_bytes()
    except OSError as exc:
        return Fit(kind, name, f"{target} is missing ({exc.strerror})")
    if block.get("sha256") != artifact.sha256(data):
        return Fit(kind, name, "its checksum differs: the file is damaged or another one")
    made = block.get("fingerprint")
    if not isinstance(made, dict) or not made.get("torch"):
        return Fit(kind, name, "the export says nothing of what it was made with")
    where = device or ("cuda:0" if made.get("device") == "cuda" else "cpu")
    return Fit(kind, name, differs=fits(made, artifact.requirements(where)))
