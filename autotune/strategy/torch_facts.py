"""What the running torch offers a search space: Inductor's modes (each with the options it
sets), Inductor's option names and Dynamo's production backends.

Reading them imports Dynamo, Inductor and every backend module: about 2 s of CPU, in every
``autotune`` process that parses a spec (a ``submit``, a ``worker``, a ``search``), although
none of them compiles anything (their trials do, in children). So they are read once per torch
build and kept as JSON in the user's cache folder, under a key made of torch's version and
build, the dates of the files that define them and the backends that installed packages
register. A process that has already imported Dynamo and Inductor (a child about to compile,
the user's own code) reads them live: only there could a backend have been registered since.

The kept file is data: it is checked to hold only names, and option values that are numbers or
booleans (never a path or a command), and anything else in it is ignored and read again from
torch. A compile imports Inductor first (``Strategy.compile_kwargs``), so the options it passes
to torch are read live.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from autotune import variables

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


@dataclasses.dataclass(frozen=True)
class TorchFacts:
    """Inductor's modes and the options each sets, Inductor's option names, and the backends
    ``torch._dynamo.list_backends()`` lists (its production ones)."""

    modes: dict[str, dict[str, Any]]
    options: frozenset[str]
    backends: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"modes": self.modes, "options": sorted(self.options),
                "backends": list(self.backends)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Any) -> TorchFacts:
        """Parse a kept file's contents; raise ``ValueError`` unless it holds only names and
        scalar option values."""
        modes, options, backends = data["modes"], data["options"], data["backends"]
        scalar = (bool, int, float)
        if not (
            isinstance(modes, dict) and isinstance(options, list) and isinstance(backends, list)
            and all(isinstance(n, str) and _NAME.match(n) for n in [*options, *backends, *modes])
            and all(isinstance(o, dict) and all(isinstance(k, str) and k in options
                                                and isinstance(v, scalar) for k, v in o.items())
                    for o in modes.values())
        ):  # fmt: skip
            raise ValueError("not autotune's record of torch's modes, options and backends")
        return cls(modes, frozenset(options), tuple(backends))


def live() -> TorchFacts:
    """Read the facts from torch itself (imports Dynamo, Inductor and the backend modules)."""
    modes, options = _inductor()
    return TorchFacts(modes, options, _backends())


def inductor() -> tuple[dict[str, dict[str, Any]], frozenset[str]]:
    """Inductor's modes (each with the options it sets) and its option names: live where
    Inductor is imported, else kept. Callers must not change them."""
    if "torch._inductor" in sys.modules:
        return _inductor()
    kept = _kept()
    return kept.modes, kept.options


def backends() -> tuple[str, ...]:
    """Dynamo's production backends: live where Dynamo is imported (read each time: a user may
    register one at any moment), else kept."""
    return _backends() if "torch._dynamo" in sys.modules else _kept().backends


@functools.cache
def _inductor() -> tuple[dict[str, dict[str, Any]], frozenset[str]]:
    import torch._inductor

    modes = {m: dict(o) for m, o in torch._inductor.list_mode_options().items()}
    return modes, frozenset(torch._inductor.list_options())  # torch's constants: read once


def _backends() -> tuple[str, ...]:
    import torch._dynamo

    return tuple(torch._dynamo.list_backends())  # excludes debug and experimental ones


@functools.cache
def _kept() -> TorchFacts:
    return kept(variables.cache_home() / "torch" / f"{key()}.json")


def kept(path: Path) -> TorchFacts:
    """The facts kept at ``path``; where it holds none, or anything but autotune's record of
    them, they are read from torch and kept there."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return TorchFacts.from_dict(json.loads(path.read_text()))
    found = live()
    with contextlib.suppress(OSError):  # a read-only home still works, at the import's cost
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as f:
            try:
                json.dump(found.to_dict(), f)
                f.close()
                os.replace(f.name, path)  # whole or not at all, whoever reads it meanwhile
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(f.name)  # left only where the replace failed
    return found


def key() -> str:
    """What the facts depend on: torch's version, build and folder, the dates of the modules
    that define them, and the backends installed packages register."""
    import torch

    root = Path(torch.__file__).parent
    files = ("_inductor/__init__.py", "_inductor/config.py", "_dynamo/backends/registry.py")
    dates = [str((root / f).stat().st_mtime_ns) if (root / f).exists() else "-" for f in files]
    plugins = sorted(f"{e.name}={e.value}" for e in
                     importlib.metadata.entry_points(group="torch_dynamo_backends"))  # fmt: skip
    parts = [torch.__version__, str(torch.version.git_version), str(root), *dates, *plugins]
    return f"{torch.__version__}-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
