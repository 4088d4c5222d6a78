"""The search space: the strategy values a study may try. The only place that calls suggest_*.

By default it holds every granularity, backend, mode, ``dynamic`` and ``fullgraph`` value that
the running torch supports on the device; comma lists or a spec file narrow it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError
from autotune.strategy import (
    GRANULARITIES,
    Strategy,
    inductor_modes,
    parse_dynamic,
    registered_backends,
)

if TYPE_CHECKING:
    import optuna

DIMENSIONS = ("granularity", "backend", "mode", "dynamic", "fullgraph")
# Backends whose compiler lives in another package: in the default space only when importable.
_BACKEND_PACKAGES = {"tvm": "tvm", "openxla": "torch_xla", "openxla_eval": "torch_xla"}


def default_backends(device: str) -> list[str]:
    """inductor, aot_eager and eager, plus the other production backends usable here."""
    import torch._dynamo

    usable = ["inductor", "aot_eager", "eager"]
    for name in torch._dynamo.list_backends():  # excludes debug and experimental ones
        package = _BACKEND_PACKAGES.get(name)
        if name in usable or (package and importlib.util.find_spec(package) is None):
            continue
        if Strategy.create("full", name).needs_cuda() and not device.startswith("cuda"):
            continue
        usable.append(name)
    return usable


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text not in ("true", "false"):
        raise ConfigError(f"bad fullgraph value {value!r}: use true or false")
    return text == "true"


@dataclass(frozen=True)
class Space:
    """Allowed values per strategy field; :meth:`strategies` lists its canonical members."""

    granularity: tuple[str, ...] = GRANULARITIES
    backend: tuple[str, ...] = ("inductor", "aot_eager", "eager")
    mode: tuple[str, ...] = ("default",)
    dynamic: tuple[bool | None, ...] = (None, True, False)
    fullgraph: tuple[bool, ...] = (False, True)

    @classmethod
    def default(cls, device: str) -> Space:
        """Everything the running torch supports on ``device``."""
        modes = tuple(
            m for m in inductor_modes() if device.startswith("cuda") or not _cuda_mode(m)
        )
        return cls(GRANULARITIES, tuple(default_backends(device)), modes)

    def narrow(self, **lists: Any) -> Space:
        """Replace the named dimensions with the given values (strings split on commas)."""
        changes: dict[str, tuple] = {}
        for name, values in lists.items():
            if name not in DIMENSIONS:
                raise ConfigError(f"unknown space key {name!r}: use {', '.join(DIMENSIONS)}")
            if values is None:
                continue
            if isinstance(values, str):
                values = [v.strip() for v in values.split(",") if v.strip()]
            if not isinstance(values, (list, tuple)):
                values = [values]
            parse = {"dynamic": parse_dynamic, "fullgraph": _parse_bool}.get(name, str)
            changes[name] = tuple(dict.fromkeys(parse(v) for v in values))
        return dataclasses.replace(self, **changes)

    def validate(self, device: str) -> list[Strategy]:
        """Check every value against torch; return the members that can run on ``device``."""
        for name in DIMENSIONS:
            if not getattr(self, name):
                raise ConfigError(f"the search space is empty: no {name} value is left")
        for g in self.granularity:
            Strategy.create(g)
        known, modes = registered_backends(), inductor_modes()
        for b in self.backend:
            if ":" not in b and b not in known:
                raise ConfigError(f"unknown backend {b!r} in the space; known: {', '.join(known)}")
        for m in self.mode:
            if m not in modes:
                raise ConfigError(f"unknown mode {m!r} in the space; known: {', '.join(modes)}")
        members = [s for s in self.strategies() if not (s.needs_cuda() and device == "cpu")]
        if not members:
            raise ConfigError(f"the search space is empty: nothing in it can run on {device}")
        return members

    def strategies(self) -> list[Strategy]:
        """Every canonical strategy in the space, each once, in a stable order."""
        seen: dict[str, Strategy] = {}
        for g in self.granularity:
            for b in self.backend if g != "none" else ("none",):
                for m in self.mode if b == "inductor" else (None,):
                    for d in self.dynamic:
                        for f in self.fullgraph:
                            s = Strategy.create(g, b, m, d, f)
                            seen.setdefault(s.key, s)
        return list(seen.values())

    def distributions(self) -> dict[str, Any]:
        """Optuna's distribution of each field: every trial suggests all five."""
        from optuna.distributions import CategoricalDistribution

        return {name: CategoricalDistribution(list(getattr(self, name))) for name in DIMENSIONS}

    def suggest(self, trial: optuna.trial.Trial) -> Strategy:
        """Ask the trial for every field; the fields that do not apply are ignored."""
        values = {n: trial.suggest_categorical(n, list(getattr(self, n))) for n in DIMENSIONS}
        return Strategy.create(**values)

    def params(self, strategy: Strategy) -> dict[str, Any]:
        """The trial parameters of ``strategy``: each field that does not apply (mode outside
        inductor, everything but granularity for eager) takes the space's first value."""
        s = strategy.canonical()
        fixed = {name: getattr(self, name)[0] for name in DIMENSIONS}
        if s.granularity == "none":
            return {**fixed, "granularity": "none"}
        mode = s.mode if s.backend == "inductor" else fixed["mode"]
        return {"granularity": s.granularity, "backend": s.backend, "mode": mode,
                "dynamic": s.dynamic, "fullgraph": s.fullgraph}  # fmt: skip

    def contains(self, other: Space) -> bool:
        """Whether every value of ``other`` is one of this space's."""
        return all(set(getattr(other, n)) <= set(getattr(self, n)) for n in DIMENSIONS)

    def to_dict(self) -> dict[str, list]:
        return {name: list(getattr(self, name)) for name in DIMENSIONS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Space:
        return cls().narrow(**data)


def _cuda_mode(mode: str) -> bool:
    return bool(inductor_modes().get(mode, {}).get("triton.cudagraphs"))
