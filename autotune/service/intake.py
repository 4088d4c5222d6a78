"""A study spec from an HTTP request: the same tables as a spec file (``model``, ``workload``,
``space``, ``search``), under the service's rule that **a request never makes the server or a
worker import or run code it names**.

- A model is a catalog preset, or a directory under the root the operator gave
  (``--model-root``); it is stored as its real path, so a symbolic link or ``..`` that leads
  out of the root is refused. The same holds for ``weights``.
- A ``package.module:function`` model or backend is refused with one line, whoever asks.
- The device is kept as named (``cuda`` on a server without a GPU is a study for the workers
  that have one); ``auto`` is refused, since the server's device says nothing of theirs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from autotune import catalog, usercode
from autotune.catalog.presets import PRESETS
from autotune.errors import ConfigError
from autotune.search.spec import StudySpec, check_tables
from autotune.service.problems import Refused

NO_CODE = ("autotune serve runs no code named in a request; submit a spec that names code with "
           "'autotune submit' from a machine you control, and run it with 'autotune worker "
           "--allow-code'")  # fmt: skip
SCALARS = (str, int, float, bool, type(None))


def _check_values(tables: dict[str, dict[str, Any]]) -> None:
    """Every value is a JSON scalar or a list of scalars (no objects, no nested lists; a
    traffic is a list of ``[batch_size, seq_len]`` pairs of scalars)."""
    for table, values in tables.items():
        for key, value in values.items():
            items = value if isinstance(value, list) else [value]
            if (table, key) == ("workload", "traffic") and isinstance(value, list):
                items = [v for pair in value for v in (pair if isinstance(pair, list) else [pair])]
            if not all(isinstance(v, SCALARS) for v in items):
                raise ConfigError(f"[{table}] {key}: expected a value or a list of values")


def _refuse_code(tables: dict[str, dict[str, Any]]) -> None:
    backends = tables.get("space", {}).get("backend")
    if isinstance(backends, str):
        backends = [b.strip() for b in backends.split(",")]
    named = [("model", tables.get("model", {}).get("name"))]
    named += [("backend", b) for b in (backends if isinstance(backends, list) else [])]
    found = [f"{what} {name}" for what, name in named if isinstance(name, str) and ":" in name]
    if found:
        raise Refused(403, f"refused: the spec names code ({', '.join(found)}): {NO_CODE}")


def under_root(name: str, root: Path | None, what: str) -> str:
    """The real path of a directory a request names, which must lie under ``root``."""
    if root is None:
        presets = ", ".join(PRESETS)
        raise Refused(403, f"refused: {what} {name!r} is no catalog preset ({presets}), and "
                      "this service takes no model directories (its operator gave no "
                      "--model-root)")  # fmt: skip
    path = Path(name) if os.path.isabs(name) else root / name
    real = Path(os.path.realpath(path))
    if real != root and root not in real.parents:
        raise Refused(403, f"refused: {what} {name!r} is outside the model root")
    if not real.is_dir():
        raise ConfigError(f"{what} {name!r}: no such directory under the model root")
    return str(real)


def spec_from_request(data: Any, model_root: Path | None) -> StudySpec:
    """The study spec a request's JSON body describes, or ``Refused``/``ConfigError`` (one line)
    before anything is stored or any code is imported."""
    tables = {t: dict(v) for t, v in check_tables(data, "the spec").items()}
    _check_values(tables)
    _refuse_code(tables)
    model = tables.setdefault("model", {})
    name = model.get("name")
    if isinstance(name, str) and name not in PRESETS:
        model["name"] = under_root(name, model_root, "model")
    if isinstance(model.get("weights"), str):
        model["weights"] = under_root(model["weights"], model_root, "weights")
    workload = tables.get("workload", {})
    if isinstance(workload.get("traffic"), str):  # a path would read the server's files
        raise ConfigError("[workload] traffic: submit the requests themselves, a list of "
                          "[batch_size, seq_len] pairs, not a file on the server")  # fmt: skip
    if workload.get("device") == "auto":
        raise ConfigError("[workload] device 'auto' means the server's device: name the "
                          "workers' (cpu, cuda or cuda:N)")  # fmt: skip
    if workload.get("dtype") == "auto":
        raise ConfigError("[workload] dtype 'auto' means the server's CPU's: name the dtype the "
                          "workers serve in (float32, bfloat16 or float16)")  # fmt: skip
    try:
        spec = StudySpec.from_tables(tables, resolve_device=False)
    except (TypeError, ValueError, AttributeError) as exc:  # a value of an unexpected shape
        raise ConfigError(f"bad spec: {usercode.line(exc)}") from None
    catalog.check(spec.model, spec.workload)  # presets and directories: reads config.json only
    spec.space.validate(spec.workload.device, spec.workload.kind)
    return spec
