"""The environment variables autotune reads: here alone, and at call time, so that every module
sees one value and a changed one is seen by the next call.

| variable | what it sets | default |
| --- | --- | --- |
| ``AUTOTUNE_STUDIES`` | the studies folder: storage, exports, kept caches, this | ``studies`` |
|                      | machine's ``--dtype auto`` decisions (``decisions.json``) | |
| ``AUTOTUNE_STORAGE`` | the study storage's URL | a SQLite file in the studies folder |
| ``AUTOTUNE_ARTIFACTS`` | where cache artefacts are kept | ``autotune/artifacts`` in the cache |
| ``XDG_CACHE_HOME`` | the cache folder; ``autotune/`` in it keeps artefacts and | ``~/.cache`` |
|                    | what torch offers (:mod:`autotune.strategy.torch_facts`) | |
| ``AUTOTUNE_TRUST_ARTIFACTS`` | ``1``: load shipped artefacts (they run code) | not trusted |
| ``AUTOTUNE_TOKEN`` | the token ``autotune serve`` asks of writes | none |
| ``AUTOTUNE_HEARTBEAT_S`` | how often a worker beats its claims | 5 |
| ``AUTOTUNE_GRACE_S`` | silence after which a worker is presumed dead | 30 |
| ``AUTOTUNE_DB_RETRY_S`` | how long a database outage is waited out | 300 |
| ``AUTOTUNE_PRELOAD`` | more for a trial's fork server to import first: ``compilers``, | none |
|                      | ``transformers`` (the test suite's; see :func:`preload`) | |
| ``ONEDNN_MAX_CPU_ISA`` | oneDNN's own: read where it caps native bfloat16 | none |
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from autotune.errors import ConfigError

STORAGE, ARTIFACTS, TRUST, TOKEN = (
    "AUTOTUNE_STORAGE", "AUTOTUNE_ARTIFACTS", "AUTOTUNE_TRUST_ARTIFACTS", "AUTOTUNE_TOKEN",
)  # fmt: skip


def _text(name: str) -> str | None:
    return os.environ.get(name) or None


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"${name}={raw!r}: give a positive number of seconds")
    return value


def studies() -> Path:
    """The studies folder (``$AUTOTUNE_STUDIES``, else ``studies`` in the working directory):
    the default SQLite storage, the exported files and the caches kept for a confirmation
    live under it."""
    return Path(_text("AUTOTUNE_STUDIES") or "studies")


def default_storage() -> str:
    """The storage used when none is named: a SQLite file in the studies folder."""
    return f"sqlite:///{studies() / 'autotune.db'}"


def storage() -> str | None:
    """``$AUTOTUNE_STORAGE``, the storage URL when ``--storage`` is not given."""
    return _text(STORAGE)


def onednn_max_isa() -> str | None:
    """``$ONEDNN_MAX_CPU_ISA``, oneDNN's cap on the instructions it uses (read, never set)."""
    return _text("ONEDNN_MAX_CPU_ISA")


def cache_home() -> Path:
    """autotune's folder in the user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``)."""
    return Path(_text("XDG_CACHE_HOME") or Path.home() / ".cache") / "autotune"


def artifacts() -> str | None:
    """``$AUTOTUNE_ARTIFACTS``, where the compile-cache artefacts are kept."""
    return _text(ARTIFACTS)


def trust_artifacts() -> bool:
    """``$AUTOTUNE_TRUST_ARTIFACTS=1``: the user trusts shipped artefacts (they run code)."""
    return os.environ.get(TRUST, "") == "1"


def token() -> str | None:
    """``$AUTOTUNE_TOKEN``, the token the service asks of writes."""
    return _text(TOKEN)


def heartbeat_s() -> float:
    """How often a worker beats its claims (``$AUTOTUNE_HEARTBEAT_S``, 5 s)."""
    return _seconds("AUTOTUNE_HEARTBEAT_S", 5.0)


def grace_s() -> float:
    """How long a claim may be silent before its worker is presumed dead
    (``$AUTOTUNE_GRACE_S``, 30 s)."""
    return _seconds("AUTOTUNE_GRACE_S", 30.0)


def reap_s() -> float:
    """How often a worker looks for dead workers' trials."""
    return max(heartbeat_s(), grace_s() / 3)


def db_retry_s() -> float:
    """How long a database outage is waited out (``$AUTOTUNE_DB_RETRY_S``, 300 s)."""
    return _seconds("AUTOTUNE_DB_RETRY_S", 300.0)


PRELOADS = {
    # what a compile imports on its first call: AOTAutograd (aot_eager, Inductor) and Inductor
    "compilers": ("torch._functorch.aot_autograd", "torch._inductor.compile_fx"),
    # what the catalog's transformers models import when built
    "transformers": ("transformers", "transformers.models.gemma.modeling_gemma",
                     "transformers.models.llama.modeling_llama",
                     "transformers.models.gpt2.modeling_gpt2"),
}  # fmt: skip


def preload() -> list[str]:
    """The modules a trial's fork server imports besides torch and Dynamo
    (``$AUTOTUNE_PRELOAD``: ``compilers``, ``transformers``, comma-separated; none by default).
    Ignored on a machine with a CUDA GPU, where their import initialised CUDA in the fork
    server and no child could use it. The test suite sets both: each child then skips
    seconds of imports, and a compile's time leaves out AOTAutograd's and Inductor's import,
    which a user's first compile pays and the product and the benchmarks measure. A fixed
    table, so the variable names no module itself."""
    words = [w.strip() for w in (_text("AUTOTUNE_PRELOAD") or "").split(",") if w.strip()]
    unknown = [w for w in words if w not in PRELOADS]
    if unknown:
        raise ConfigError(f"$AUTOTUNE_PRELOAD={unknown[0]!r}: give {' or '.join(PRELOADS)}")
    return [m for w in words for m in PRELOADS[w]]
