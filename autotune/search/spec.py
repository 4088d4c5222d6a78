"""StudySpec: everything a study needs (model, workload, space, budget), from TOML and flags,
or as a study stored it: the one spec type, and the one reader of a spec's tables.

A spec file (``studies/*.toml``) has the tables ``[model]``, ``[workload]``, ``[space]`` and
``[search]``; command-line flags override it. Unknown keys are errors, never ignored; every
value's type is checked (:mod:`autotune.fields`), so ``trials = 2.7`` is refused, not rounded.
Each setting's default and help text live on its dataclass field, nowhere else. A stored spec
(:meth:`StudySpec.to_dict`'s JSON, maybe another autotune version's) is read back leniently by
:meth:`StudySpec.from_dict`.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import arrivals, fields
from autotune.catalog import ModelRef
from autotune.choice import objectives
from autotune.choice.objectives import DEFAULT_LIFETIME
from autotune.errors import AutotuneError, AutotuneWarning, ConfigError
from autotune.fields import boolean, option, parse_duration, parse_memory, text, whole
from autotune.start_kinds import parse
from autotune.strategy.space import KEYS, Space
from autotune.trial.rungs import RUNGS
from autotune.workload import Settings, Workload, default_objectives

SAMPLERS = ("surrogate", "tpe", "gp", "nsga2", "random", "grid")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
NAME_CHARS = 128


def check_name(name: Any, key: str = "study") -> str:
    """A study name: letters, digits and ``._+-``, starting with a letter or digit, at most
    128 characters, no ``..``. It names files (``studies/<name>/best.json``), so nothing that
    walks out of a folder or that a file system refuses gets in."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
        raise ConfigError(f"bad study name {name!r}: use letters, digits and . _ + - (starting "
                          "with a letter or digit)")  # fmt: skip
    if len(name) > NAME_CHARS:
        raise ConfigError(f"bad study name: {len(name)} characters, at most {NAME_CHARS}")
    return name


def _policy(value: Any, key: str) -> str:
    objectives.parse_policy(value)
    return value


def read_toml(path: str) -> dict[str, dict[str, Any]]:
    """Read a spec file, rejecting unknown tables and keys with the allowed ones named."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"space file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"space file {path} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"space file {path} is not valid TOML: {exc}") from None
    return check_tables(data, path)


def check_tables(data: Any, where: str) -> dict[str, dict[str, Any]]:
    """A spec's tables (from a TOML file or a JSON request): unknown tables and keys are
    refused with the allowed ones named."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a spec is a table of tables: {', '.join(TABLES)}")
    for table, values in data.items():
        if table not in TABLES or not isinstance(values, dict):
            raise ConfigError(f"{where}: unknown table [{table}]; use {', '.join(TABLES)}")
        for key in values:
            if key not in TABLES[table]:
                raise ConfigError(
                    f"{where}: unknown key {key!r} in [{table}]; use {', '.join(TABLES[table])}"
                )
    return data


# `autotune search`'s and tune()'s default time, where neither a flag nor a spec file gives one:
# a newcomer's first search answers within a coffee break on any machine (its plan fits the
# rounds and trials to it); --time-budget none lifts it. A submitted study has no default; its
# workers keep the study's budget, as a search's workers do.
DEFAULT_BUDGET_S = 600.0


@dataclass(frozen=True)
class StudySpec:
    """A whole study: what to measure, the space to search, and the budget."""

    model: ModelRef
    workload: Workload
    space: Space
    trials: int = option(30, "strategies to measure in the study", read=whole(1), cli_type=int)
    time_budget_s: float | None = option(
        None,
        "the whole search's time, e.g. 30m or 2h, baseline and confirmation included (each "
        "search fits its rounds and trials to it, a worker's from when it joins); none: no "
        "limit; autotune search without --space: 10m unless given",
        toml="time_budget",
        read=parse_duration,
    )
    sampler: str = option("surrogate", f"the sampler: {', '.join(SAMPLERS)} (surrogate: "
                          "autotune's model of the factors, TPE where it has no pick)",
                          read=text(SAMPLERS))  # fmt: skip
    objectives: tuple[str, ...] = option(
        None, "START,SPEED[,memory]: START is compile (a cold start), warm, ...; SPEED latency, "
        "decode or ttft (generate, continuous) or goodput (continuous, with --slo) (default "
        "compile,latency; compile,decode for generate)", read=lambda v, k: objectives.parse(v),
    )  # fmt: skip
    max_memory_mb: float | None = option(
        None,
        "trials above this peak (e.g. 8GiB) are infeasible",
        toml="max_memory",
        read=parse_memory,
    )
    policy: str = option(None, "knee, fastest, quickest, amortized:CALLS, amortized:TIME (1h, "
                         "30min), restarts:STARTS:CALLS or latency-budget:MS (default: amortized "
                         f"over --calls, else over {DEFAULT_LIFETIME} of serving at eager's "
                         "latency)", read=_policy)  # fmt: skip
    calls: int | None = option(None, "the calls one process serves between starts (its "
                               "lifetime): the pick minimises time to ready + calls x latency",
                               read=whole(1), cli_type=int)  # fmt: skip
    settings: Settings = field(default_factory=Settings)
    study: str | None = option(None, "study name (default: a slug of model, workload, hardware "
                               "and torch)", read=check_name)  # fmt: skip
    equivalence: bool = option(False, "tell compiles a trial proves identical (dynamic none/false "
                               "without a recompile, fullgraph true/false without a break) its "
                               "measurement", read=boolean)  # fmt: skip
    rungs: str = option("cheap", "cheap: a compiled trial stops after a few rounds where it "
                        "cannot reach the front (docs/search.md); full: every trial times all "
                        "its rounds", read=text(RUNGS))  # fmt: skip
    # what of a stored spec this autotune could not read, as an error says it (:meth:`from_dict`)
    unread: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        fields.validate(self)
        if self.policy is None:  # a continuous workload's: its requests over the lifetime
            rate = arrivals.rate_of(self.workload)
            object.__setattr__(self, "policy", objectives.lifetime(self.calls, rate))
        if self.objectives is None:
            object.__setattr__(self, "objectives", default_objectives(self.workload.kind))
        known = set(self.objectives) <= set(objectives.OBJECTIVES)
        if known and (added := objectives.starts_needed(self.objectives, self.settings.starts)):
            starts = parse((*self.settings.starts, *added))
            object.__setattr__(self, "settings", dataclasses.replace(self.settings, starts=starts))
            warnings.warn(f"objectives {','.join(self.objectives)} measure {', '.join(added)} "
                          f"starts: --starts is now {','.join(starts)}", AutotuneWarning,
                          stacklevel=2)  # fmt: skip
        w = self.workload
        objectives.check(self.objectives, self.settings.starts, w.kind, w.slo)
        if self.workload.kind == "train" and (frozen := set(self.space.options) & {"freezing"}):
            raise ConfigError(f"option {frozen.pop()} folds the weights into constants: it is "
                              "for inference and generate workloads, not train")  # fmt: skip

    @staticmethod
    def asked_dtype(toml: str | None = None, **flags: Any) -> str | None:
        """The dtype the flags or the spec file asked for (``auto`` before it is resolved)."""
        if flags.get("dtype"):
            return str(flags["dtype"])
        asked = (read_toml(toml).get("workload") or {}).get("dtype") if toml else None
        return None if asked is None else str(asked)

    @classmethod
    def from_sources(cls, toml: str | None = None, *, searched: bool = False,
                     **flags: Any) -> StudySpec:  # fmt: skip
        """Merge a spec file and flags (flags win; a flag of None means 'not given'). Flags are
        named as the command line's options are (``model``, ``workload``, ``time_budget``).
        ``searched``: a search run now (``autotune search``, :func:`autotune.tune`), whose
        budget is :data:`DEFAULT_BUDGET_S` when neither a flag nor a spec file gives one."""
        if searched and toml is None and flags.get("time_budget") is None:
            flags["time_budget"] = DEFAULT_BUDGET_S
        return cls.from_tables(read_toml(toml) if toml else {}, **flags)

    @classmethod
    def from_tables(
        cls, data: dict[str, dict[str, Any]], *, resolve_device: bool = True, **flags: Any
    ) -> StudySpec:
        """A spec from tables checked by :func:`check_tables`, and flags (flags win). With
        ``resolve_device=False`` the device is kept as named (``cuda`` on a machine without
        one: a study submitted for the workers that have one), ``cpu`` when none is named."""
        tables = {table: dict(data.get(table, {})) for table in TABLES}
        for table, keys in TABLES.items():
            for key in keys:
                if flags.get(dest := DESTS.get(key, key)) is not None:
                    tables[table][key] = flags[dest]
        if "name" not in tables["model"]:
            raise ConfigError("no model: give --model or a [model] name in the space file")
        search = tables["search"]
        if "seed" in search:  # one seed for the weights, the inputs and the sampler
            tables["model"]["seed"] = search["seed"]
        model = ModelRef(**fields.read(ModelRef, tables["model"], "[model] "))
        values = fields.read(Workload, tables["workload"], "[workload] ")
        w = Workload.create(**values) if resolve_device else Workload(**values)
        space = Space.default(w.device, w.kind).for_traffic(w.traffic, w.kind, w.answers,
                                                            w.is_cuda)  # fmt: skip
        space = space.narrow(**tables["space"])
        settings = Settings(**fields.read(Settings, {"seed": model.seed, **search}, "[search] "))
        chosen = fields.read(cls, search, "[search] ")
        return cls(model=model, workload=w, space=space, settings=settings, **chosen)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        del data["unread"]
        data.update(model=self.model.to_dict(), space=self.space.to_dict())
        return data

    @classmethod
    def from_dict(cls, data: Any, study: str = "") -> StudySpec:
        """A spec as :meth:`to_dict` stored it, by this autotune version or another, read
        leniently, never changed: a key it lacks takes its default (policy ``knee``: a study
        stored before it kept one), one it does not know is left alone. A value of
        :data:`JUDGED` that cannot be read is a ``ConfigError`` naming ``study`` and the key;
        any other is left out (its default), named in ``unread``: the study still shows and
        exports, and no search runs on it (:meth:`check`)."""
        read = _Stored(study, data)
        model = read("model", lambda t: ModelRef(**_known(ModelRef, t)))
        workload = read("workload", _workload)
        settings = read("settings", lambda t: Settings(**_known(Settings, t)))
        space = read("space", _space) or Space()
        values: dict[str, Any] = {"policy": "knee"}
        for f in fields.fields(cls):
            if data.get(f.name) not in (None, []):  # [] objectives: the kind's
                value = read(f.name, lambda v, f=f: f.metadata["read"](v, f.name))
                values.update({f.name: value} if value is not None else {})
        try:
            return cls(model=model, workload=workload, space=space, settings=settings,
                       unread=read.left_out(), **values)  # fmt: skip
        except (AutotuneError, TypeError, ValueError) as exc:
            raise read.error(str(exc)) from None

    def check(self) -> StudySpec:
        """This spec, every value read: ``ConfigError`` where a stored one could not be (it
        names them): no search runs on a default that stands in for a stored value."""
        if self.unread:
            raise ConfigError(self.unread)
        return self

    def study_name(self, environment: dict[str, Any]) -> str:
        """The study's name: given, or a readable slug of model, workload, hardware and torch."""
        if self.study:
            return self.study
        hardware = re.sub(r"[^a-z0-9]+", "-", str(environment.get("device_name", "")).lower())
        torch_version = str(environment.get("torch", "")).replace("+", "-")
        name = f"{self.model.slug()}-{self.workload.slug()}-{hardware[:24].strip('-')}"
        return check_name(f"{name}-torch{torch_version}"[:NAME_CHARS])


# What a study's answer depends on (what was measured, and how a pick is judged): a stored value
# of these that cannot be read is an error wherever the spec is read, never a default.
JUDGED = ("model", "workload", "settings", "objectives", "policy", "max_memory_mb")


@dataclass
class _Stored:
    """A stored spec being read (:meth:`StudySpec.from_dict`), and what of it could not be."""

    study: str
    data: Any
    unread: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.data, dict):
            raise self.error(f"it is {type(self.data).__name__}, not a table of settings")

    def __call__(self, key: str, read: Callable[[Any], Any]) -> Any:
        """``key``'s stored value through ``read`` (None: unreadable, and not :data:`JUDGED`)."""
        try:
            return read(self.data.get(key))
        except (AutotuneError, TypeError, ValueError) as exc:
            what = str(exc) if str(exc).startswith(key) else f"{key}: {exc}"
            if key in JUDGED:
                raise self.error(what) from None
            self.unread.append(what)
            return None

    def left_out(self) -> str:
        return str(self.error("; ".join(self.unread))) if self.unread else ""

    def error(self, what: str) -> ConfigError:
        study = f"study {self.study!r}" if self.study else "a study"
        return ConfigError(f"{study}: its stored spec cannot be read: {what} (stored by another "
                           "autotune version, or changed by hand?)")  # fmt: skip


def _known(cls: type, table: Any) -> dict[str, Any]:
    """A stored table's keys that ``cls`` takes (another version's are left alone)."""
    if not isinstance(table, (dict, type(None))):
        raise ConfigError(f"{table!r}: expected a table")
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    return {k: v for k, v in (table or {}).items() if k in names}


def _workload(table: Any) -> Workload:
    known = _known(Workload, table)
    if not isinstance(known.get("traffic", ()), (list, tuple)):  # requests, never a file
        raise ConfigError(f"traffic = {known['traffic']!r}: expected a list of requests")
    for key in ("batch_size", "seq_len"):  # one shape, never a spread to draw
        whole(1)(known.get(key, 1), key)
    return Workload(**known)


def _space(table: Any) -> Space:
    known = _known(Space, table)
    for name in set(KEYS) - {"dynamic", "fullgraph"}:  # lists of names (those two: parsed)
        fields.texts(known.get(name, []), name)
    return Space.from_dict(known)


def _keys(cls: type) -> tuple[str, ...]:
    return tuple(fields.toml_key(f) for f in fields.fields(cls))


TABLES = {
    "model": _keys(ModelRef),
    "workload": _keys(Workload),
    "space": KEYS,
    "search": tuple(dict.fromkeys(_keys(StudySpec) + _keys(Settings))),
}
# the command line's name of a key, where it differs (--model, --workload)
DESTS = {
    fields.toml_key(f): fields.flag(f).lstrip("-").replace("-", "_")
    for cls in (ModelRef, Workload, Settings, StudySpec)
    for f in fields.fields(cls)
}
