"""StudySpec: everything a study needs (model, workload, space, budget), from TOML and flags.

A spec file (``studies/*.toml``) has the tables ``[model]``, ``[workload]``, ``[space]`` and
``[search]``; command-line flags override it. Unknown keys are errors, never ignored.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.catalog import ModelRef
from autotune.errors import ConfigError
from autotune.selection import check_objectives, parse_policy
from autotune.space import Space
from autotune.starts import STARTS
from autotune.workload import Settings, Workload

SAMPLERS = ("tpe", "gp", "nsga2", "random", "grid")
SEARCH_KEYS = (
    "trials", "time_budget", "sampler", "objectives", "max_memory", "policy", "iters", "warmup",
    "timeout", "seed", "study", "starts", "equivalence",
)  # fmt: skip
TABLES = {
    "model": ("name", "layers", "seed", "weights"),
    "workload": ("batch_size", "seq_len", "dtype", "device", "kind", "new_tokens"),
    "space": ("granularity", "backend", "mode", "dynamic", "fullgraph", "options"),
    "search": SEARCH_KEYS,
}
_UNITS = {"s": 1, "m": 60, "h": 3600}
_SIZES = {"": 1, "mib": 1, "mb": 1, "gib": 1024, "gb": 1024}


def parse_duration(text: str | float | int | None) -> float | None:
    """``90``, ``90s``, ``30m``, ``2h`` or ``1h30m`` as seconds."""
    if text is None or isinstance(text, (int, float)):
        return None if text is None else float(text)
    parts = re.fullmatch(r"((\d+(\.\d+)?)\s*([smh])\s*)+", text.strip().lower())
    if not parts:
        if re.fullmatch(r"\d+(\.\d+)?", text.strip()):
            return float(text)
        raise ConfigError(f"bad duration {text!r}: write e.g. 90s, 30m, 2h or 1h30m")
    return sum(float(n) * _UNITS[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)\s*([smh])", text))


def parse_memory(text: str | float | int | None) -> float | None:
    """``8GiB``, ``512MiB`` or a number of MiB, as MiB."""
    if text is None or isinstance(text, (int, float)):
        return None if text is None else float(text)
    match = re.fullmatch(r"(\d+(\.\d+)?)\s*([a-z]*)", text.strip().lower())
    if not match or match.group(3) not in _SIZES:
        raise ConfigError(f"bad memory size {text!r}: write e.g. 8GiB or 512MiB")
    return float(match.group(1)) * _SIZES[match.group(3)]


def read_toml(path: str) -> dict[str, dict[str, Any]]:
    """Read a spec file, rejecting unknown tables and keys with the allowed ones named."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"space file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"space file {path} is not valid TOML: {exc}") from None
    for table, values in data.items():
        if table not in TABLES or not isinstance(values, dict):
            raise ConfigError(f"{path}: unknown table [{table}]; use {', '.join(TABLES)}")
        for key in values:
            if key not in TABLES[table]:
                raise ConfigError(
                    f"{path}: unknown key {key!r} in [{table}]; use {', '.join(TABLES[table])}"
                )
    return data


@dataclass(frozen=True)
class StudySpec:
    """A whole study: what to measure, the space to search, and the budget."""

    model: ModelRef
    workload: Workload
    space: Space
    trials: int = 30
    time_budget_s: float | None = None
    sampler: str = "tpe"
    objectives: tuple[str, ...] = ("compile", "latency")
    max_memory_mb: float | None = None
    policy: str = "knee"
    settings: Settings = field(default_factory=Settings)
    study: str | None = None
    equivalence: bool = False  # tell proven-identical compiles one measurement (deduction)

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ConfigError("--trials must be at least 1")
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"bad sampler {self.sampler!r}: use one of {', '.join(SAMPLERS)}")
        check_objectives(self.objectives, self.settings.starts, self.workload.kind)
        if self.workload.kind == "train" and (frozen := set(self.space.options) & {"freezing"}):
            raise ConfigError(f"option {frozen.pop()} folds the weights into constants: it is "
                              "for inference and generate workloads, not train")  # fmt: skip
        parse_policy(self.policy)

    @classmethod
    def from_sources(cls, toml: str | None = None, **flags: Any) -> StudySpec:
        """Merge a spec file and flags (flags win; a flag of None means 'not given')."""
        data = read_toml(toml) if toml else {}
        pick = {table: dict(data.get(table, {})) for table in TABLES}
        for table, keys in TABLES.items():
            for key in keys:
                flag = {"name": "model", "kind": "workload"}.get(key, key)
                if flags.get(flag) is not None:
                    pick[table][key] = flags[flag]
        if "name" not in pick["model"]:
            raise ConfigError("no model: give --model or a [model] name in the space file")
        search = pick["search"]
        seed = int(search.get("seed", pick["model"].get("seed", 0)))
        pick["model"]["seed"] = seed
        model = ModelRef(**pick["model"])
        workload = Workload.create(**pick["workload"])
        space = Space.default(workload.device, workload.kind).narrow(**pick["space"])
        speed = "decode" if workload.kind == "generate" else "latency"
        objectives = search.get("objectives", ("compile", speed))
        if isinstance(objectives, str):
            objectives = [o.strip() for o in objectives.split(",") if o.strip()]
        settings = Settings(
            int(search.get("iters", 20)), int(search.get("warmup", 3)),
            float(search.get("timeout", 1200.0)), int(seed), search.get("starts", STARTS),
        )  # fmt: skip
        return cls(
            model=model,
            workload=workload,
            space=space,
            trials=int(search.get("trials", 30)),
            time_budget_s=parse_duration(search.get("time_budget")),
            sampler=search.get("sampler", "tpe"),
            objectives=tuple(objectives),
            max_memory_mb=parse_memory(search.get("max_memory")),
            policy=search.get("policy", "knee"),
            settings=settings,
            study=search.get("study"),
            equivalence=bool(search.get("equivalence", False)),
        )

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(model=self.model.to_dict(), space=self.space.to_dict())
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudySpec:
        data = dict(data)
        data.update(
            model=ModelRef.from_dict(data["model"]),
            workload=Workload.from_dict(data["workload"]),
            space=Space.from_dict(data["space"]),
            settings=Settings(**data["settings"]),
            objectives=tuple(data["objectives"]),
        )
        return cls(**data)

    def study_name(self, environment: dict[str, Any]) -> str:
        """The study's name: given, or a readable slug of model, workload, hardware and torch."""
        if self.study:
            return self.study
        hardware = re.sub(r"[^a-z0-9]+", "-", str(environment.get("device_name", "")).lower())
        torch_version = str(environment.get("torch", "")).replace("+", "-")
        name = f"{self.model.slug()}-{self.workload.slug()}-{hardware[:24].strip('-')}"
        return f"{name}-torch{torch_version}"
