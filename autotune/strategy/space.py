"""The search space: the strategy values a study may try. The only place that calls suggest_*.

By default it holds every granularity, backend, mode, ``dynamic`` and ``fullgraph`` value that
the running torch supports on the device, and every Inductor option switch that applies to the
device and workload; comma lists or a spec file narrow it (``--options none``: no switches).
Each switch is its own true/false trial parameter.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError
from autotune.strategy import batching, torch_facts
from autotune.strategy.inductor import (
    INFERENCE_ONLY,
    ONLY_UNDER_MODE,
    SWITCHES,
    check_switches,
    inductor_modes,
    inductor_options,
    is_mode,
)
from autotune.strategy.kv_cache import KV_CACHES
from autotune.strategy.prefill import PREFILL_BUCKETS
from autotune.strategy.shapes import BUCKETS, MARKS, STANCES, is_buckets
from autotune.strategy.strategy import (
    GRANULARITIES,
    OPTIONAL_DEFAULTS,
    PREFILLS,
    Strategy,
    is_registered,
    parse_dynamic,
    registered_backends,
)

if TYPE_CHECKING:
    import optuna

DIMENSIONS = ("granularity", "backend", "mode", "dynamic", "fullgraph")
SHAPED = ("buckets", "marks", "stance")  # dimensions a traffic opens (one shape: moot)
# ...and generation's, and continuous batching's: searched where opened
OPTIONAL = (*SHAPED, "prefill", "kv_cache", "batching")
KEYS = (*DIMENSIONS, "options", *OPTIONAL)  # the space's lists: the fields, the switches
OPTIONAL_VALUES = {"buckets": BUCKETS, "marks": MARKS, "stance": STANCES, "prefill": PREFILLS,
                   "kv_cache": KV_CACHES}  # fmt: skip
# Backends whose compiler lives in another package: in the default space only when importable.
_BACKEND_PACKAGES = {"tvm": "tvm", "openxla": "torch_xla", "openxla_eval": "torch_xla"}


def default_backends(device: str) -> list[str]:
    """inductor, aot_eager and eager, plus the other production backends usable here."""
    usable = ["inductor", "aot_eager", "eager"]
    for name in torch_facts.backends():  # excludes debug and experimental ones
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
    options: tuple[str, ...] = ()  # Inductor option switches, each tried off and on
    buckets: tuple[str, ...] = ("none",)
    marks: tuple[str, ...] = ("none",)
    stance: tuple[str, ...] = ("default",)
    prefill: tuple[str, ...] = ("compiled",)
    kv_cache: tuple[str, ...] = ("single",)
    batching: tuple[str, ...] = ("none",)

    @property
    def dimensions(self) -> tuple[str, ...]:
        """The fields each trial suggests: the five, and buckets, marks and stance under a
        traffic, the prefill's compile when generating."""
        return DIMENSIONS + tuple(n for n in OPTIONAL if len(getattr(self, n)) > 1
                                  or getattr(self, n)[0] != OPTIONAL_DEFAULTS[n])  # fmt: skip

    def for_traffic(self, requests: tuple[tuple[int, int], ...], kind: str = "inference",
                    answers: tuple[int, ...] = (), cuda: bool = False) -> Space:  # fmt: skip
        """The space over a traffic: padding buckets, a stance, and marks (backed and unbacked)
        on each dimension that varies (at one shape they are moot: no trial is spent there);
        a generate traffic's, a KV cache a bucket and its prefill padded to buckets (not yet
        auto buckets, marks or stances); a continuous one's, its batching candidates
        (:func:`autotune.strategy.batching.candidates`, of its ``answers`` too; with CUDA
        graphs where ``cuda``)."""
        if kind == "continuous":
            prompts = [s for _, s in requests]
            found = batching.candidates(prompts, list(answers), cuda)
            whole = tuple(g for g in self.granularity if g in batching.GRANULARITIES)
            return dataclasses.replace(self, batching=found, granularity=whole, fullgraph=(False,))
        if len(set(requests)) < 2:
            return self
        if kind == "generate":
            return dataclasses.replace(self, kv_cache=KV_CACHES, buckets=PREFILL_BUCKETS)
        if kind != "inference":
            return self
        batch = len({b for b, _ in requests}) > 1
        seq = len({s for _, s in requests}) > 1
        dims = ("both",) if batch and seq else ("batch",) if batch else ("seq",)
        marks = ("none", *dims, *(f"{d}-unbacked" for d in dims))
        return dataclasses.replace(self, buckets=BUCKETS, marks=marks, stance=STANCES)

    @classmethod
    def default(cls, device: str, kind: str = "inference") -> Space:
        """Everything the running torch supports on ``device`` for a ``kind`` workload (a
        generate workload's prefill compiled or left eager)."""
        cuda = device.startswith("cuda")
        modes = tuple(m for m in inductor_modes() if cuda or not _cuda_mode(m))
        known = inductor_options()
        switches = tuple(
            name for name, options in SWITCHES.items()
            if set(options) <= known and (cuda or not options.get("triton.cudagraphs"))
            and (kind != "train" or name not in INFERENCE_ONLY)
        )  # fmt: skip
        prefill = PREFILLS if kind == "generate" else ("compiled",)
        return cls(GRANULARITIES, tuple(default_backends(device)), modes, options=switches,
                   prefill=prefill)  # fmt: skip

    def narrow(self, **lists: Any) -> Space:
        """Replace the named dimensions with the given values (strings split on commas)."""
        changes: dict[str, tuple] = {}
        for name, values in lists.items():
            if name not in KEYS:
                raise ConfigError(f"unknown space key {name!r}: use {', '.join(KEYS)}")
            if values is None:
                continue
            if name == "options" and str(values).strip().lower() in ("none", "[]", ""):
                values = []
            if isinstance(values, str):
                values = [v.strip() for v in values.split(",") if v.strip()]
            if not isinstance(values, (list, tuple)):
                values = [values]
            parse = {"dynamic": parse_dynamic, "fullgraph": _parse_bool}.get(name, str)
            known = {"buckets": is_buckets, "batching": _is_batching}.get(
                name, OPTIONAL_VALUES.get(name, ()).__contains__
            )
            if name in OPTIONAL and not all(known(str(v)) for v in values):
                if name == "batching":
                    raise ConfigError(f"bad batching {list(values)}: each is key=value pairs "
                                      f"of {', '.join(batching.ORDER)}, or none")  # fmt: skip
                more = " or auto:K (K from 1 to 64)" if name == "buckets" else ""
                raise ConfigError(
                    f"bad {name} {list(values)}: use {', '.join(OPTIONAL_VALUES[name])}{more}"
                )
            changes[name] = tuple(dict.fromkeys(parse(v) for v in values))
        return dataclasses.replace(self, **changes)

    def validate(self, device: str, kind: str = "inference") -> list[Strategy]:
        """Check every value against torch (and a ``kind`` workload); return the members that
        can run on ``device``."""
        if kind == "continuous" and (set(self.granularity) - set(batching.GRANULARITIES)
                                     or True in self.fullgraph):  # fmt: skip
            Strategy.create(fullgraph=True).check_workload(kind)  # its one line
        for name in DIMENSIONS:
            if not getattr(self, name):
                raise ConfigError(f"the search space is empty: no {name} value is left")
        for g in self.granularity:
            Strategy.create(g)
        for b in self.backend:
            if ":" not in b and not is_registered(b):
                known = ", ".join(registered_backends())
                raise ConfigError(f"unknown backend {b!r} in the space; known: {known}")
        for m in self.mode:
            if not is_mode(m):
                known = ", ".join(inductor_modes())
                raise ConfigError(f"unknown mode {m!r} in the space; known: {known}")
        check_switches(self.options)
        for name in self.options:
            if SWITCHES[name].get("triton.cudagraphs") and not device.startswith("cuda"):
                raise ConfigError(f"option {name} records CUDA graphs: it needs a CUDA device, "
                                  f"and this study runs on {device}")  # fmt: skip
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
                    for o in self.switch_sets(m) if b == "inductor" else ((),):
                        for d in self.dynamic:
                            for f in self.fullgraph:
                                for k, mk, st, p, kv, bt in itertools.product(
                                    self.buckets,
                                    self.marks,
                                    self.stance,
                                    self.prefill,
                                    self.kv_cache,
                                    self.batching,
                                ):
                                    s = Strategy.create(g, b, m, d, f, o, k, mk, st,
                                                        prefill=p, kv_cache=kv,
                                                        batching=bt)  # fmt: skip
                                    seen.setdefault(s.key, s)
        return list(seen.values())

    def switch_sets(self, mode: str | None) -> list[tuple[str, ...]]:
        """Every subset of the space's switches that applies under ``mode``, fewest first."""
        names = [n for n in self.options if ONLY_UNDER_MODE.get(n, mode) == mode]
        subsets = [tuple(n for i, n in enumerate(names) if bits >> i & 1)
                   for bits in range(2 ** len(names))]  # fmt: skip
        return sorted(subsets, key=len)

    def distributions(self) -> dict[str, Any]:
        """Optuna's distribution of each field and switch: every trial suggests all of them."""
        from optuna.distributions import CategoricalDistribution

        fields = {n: CategoricalDistribution(list(getattr(self, n))) for n in self.dimensions}
        return {**fields, **{n: CategoricalDistribution([False, True]) for n in self.options}}

    def suggest(self, trial: optuna.trial.Trial) -> Strategy:
        """Ask the trial for every field and switch; those that do not apply are ignored."""
        values = {n: trial.suggest_categorical(n, list(getattr(self, n))) for n in self.dimensions}
        on = [n for n in self.options if trial.suggest_categorical(n, [False, True])]
        return Strategy.create(**values, options=on)

    def of(self, params: dict[str, Any]) -> Strategy:
        """The strategy trial parameters ``params`` name, as :meth:`suggest` reads them."""
        on = [n for n in self.options if params[n]]
        return Strategy.create(**{n: params[n] for n in self.dimensions}, options=on)

    def params(self, strategy: Strategy) -> dict[str, Any]:
        """The trial parameters of ``strategy``, each among its distribution's choices, which
        :meth:`suggest` reads back as it: those of :meth:`_params`, or, for a strategy whose key
        a combination of the space's values became (``default`` with the ``max_autotune``
        switch is ``max-autotune-no-cudagraphs``, a mode the space may not list), that
        combination. Before, such a strategy's parameters named another, measured one: a search
        proposing it repeated that one until its time ran out."""
        found = self._params(strategy)
        listed = all(found[n] in getattr(self, n) for n in self.dimensions)  # Optuna's choices
        if strategy.granularity == "none" or (listed and self.of(found).key == strategy.key):
            return found
        for mode in self.mode:
            for on in self.switch_sets(mode):
                tried = {**found, "mode": mode, **{n: n in on for n in self.options}}
                if self.of(tried).key == strategy.key:
                    return tried
        return found

    def _params(self, strategy: Strategy) -> dict[str, Any]:
        """Each field that does not apply (mode outside inductor, everything but granularity
        for eager) takes the space's first value, and each switch is on exactly when the
        strategy has it."""
        s = strategy
        fixed = {name: getattr(self, name)[0] for name in self.dimensions}
        switches = {n: n in s.options for n in self.options}
        if s.granularity == "none":
            return {**fixed, "granularity": "none", **switches}
        if batching.level_of(s.batching):  # transformers' preset: it sets the other fields
            return {**fixed, "batching": s.batching, **dict.fromkeys(switches, False)}
        mode = s.mode if s.backend == "inductor" else fixed["mode"]
        shaped = {n: getattr(s, n) for n in self.dimensions if n in OPTIONAL}
        return {"granularity": s.granularity, "backend": s.backend, "mode": mode,
                "dynamic": s.dynamic, "fullgraph": s.fullgraph, **shaped, **switches}  # fmt: skip

    def contains(self, other: Space) -> bool:
        """Whether every value of ``other`` is one of this space's."""
        return all(set(getattr(other, n)) <= set(getattr(self, n)) for n in KEYS)

    def to_dict(self) -> dict[str, list]:
        data = {name: list(getattr(self, name)) for name in KEYS}
        for name in OPTIONAL:  # a one-shape study's stored space stays as it was
            if data[name] == [OPTIONAL_DEFAULTS[name]]:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Space:
        return cls().narrow(**data)


def _is_batching(text: str) -> bool:
    try:
        batching.Batching.parse(text)
    except ConfigError:
        return False
    return True


def _cuda_mode(mode: str) -> bool:
    return bool(inductor_modes().get(mode, {}).get("triton.cudagraphs"))
