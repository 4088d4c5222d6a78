"""Objectives and policies: what a study minimises, and how one point of its front is chosen.

Objectives: one start cost (``compile`` = a cold start, ``warm``, ``portable``,
``precompiled`` or ``aot``), one speed
(``latency``; for ``--workload generate`` also ``decode``, the same per-token latency, and
``ttft``, the prefill; for ``--workload continuous`` with ``--slo`` also ``goodput``, requests a
second that met the SLO), optionally ``memory``. :data:`ATTRIBUTE` is the one table from an
objective to the value that stands for it (a :class:`autotune.choice.selection.Point`'s field); a
start's cost comes from the start-kind table (:mod:`autotune.start_kinds`).

Every objective is minimised but those of :data:`HIGHER` (goodput): Optuna maximises them
(:func:`directions`) and is told them as measured (:func:`values`); a front compares their
negative (:func:`costs`), so that a value is always shown as it was measured.

Policies (eager is a candidate in every one): ``knee``, ``fastest``, ``quickest``,
``amortized:CALLS``, ``amortized:TIME`` (a lifetime in serving time, the default),
``restarts:STARTS:CALLS``, ``latency-budget:MS`` (see :mod:`autotune.choice.selection`).

A study's objectives unless told are its workload kind's
(:func:`autotune.workload.default_objectives`: a stored spec is read with them too).
"""

from __future__ import annotations

import math
import re
from typing import Any

from autotune import arrivals, start_kinds
from autotune.errors import ConfigError

# a start's cost: compile (cold), warm, portable, ...
START_COSTS = tuple(start_kinds.BY_OBJECTIVE)
SPEEDS = ("latency", "decode", "ttft", "goodput")  # a call's cost, or good requests a second
OBJECTIVES = (*START_COSTS, *SPEEDS, "memory")
HIGHER = frozenset({"goodput"})  # objectives that are better when higher
METRICS = {**{k.objective: k.metric for k in start_kinds.TABLE},
           "latency": "latency_ms", "decode": "decode_ms_per_token", "ttft": "ttft_ms",
           "goodput": "goodput_per_s", "memory": "memory_mb"}  # fmt: skip  # Optuna's names
# a Point's field (a start's is Point.start_s)
ATTRIBUTE = {"latency": "latency_ms", "decode": "latency_ms", "ttft": "ttft_ms",
             "goodput": "goodput", "memory": "memory_mb"}  # fmt: skip
START_KIND = {k.objective: k.name for k in start_kinds.TABLE}  # what each start objective costs
POLICIES = ("knee", "fastest", "quickest", "amortized", "restarts", "latency-budget")


def parse(objectives: Any) -> tuple[str, ...]:
    """Objectives as written (``compile,latency`` or a list) as a tuple; ConfigError otherwise."""
    if isinstance(objectives, str):
        objectives = [o.strip() for o in objectives.split(",") if o.strip()]
    texts = isinstance(objectives, (list, tuple)) and all(isinstance(o, str) for o in objectives)
    if not texts:
        raise ConfigError(f"bad objectives {objectives!r}: write e.g. compile,latency")
    return tuple(objectives)


def starts_needed(objectives: tuple[str, ...], starts: tuple[str, ...]) -> tuple[str, ...]:
    """The starts that the objectives name and ``starts`` lacks (an ``aot`` objective needs aot
    starts measured): a user who named the objective has said what to measure."""
    return tuple(
        START_KIND[o] for o in objectives if o in START_KIND and START_KIND[o] not in starts
    )


def check(objectives: tuple[str, ...], starts: tuple[str, ...], kind: str = "inference",
          slo: str = "") -> None:  # fmt: skip
    """One start cost, one speed, optionally memory; decode and TTFT need a generate or a
    continuous workload, goodput a continuous one with targets in ``slo`` (``--slo``'s text)
    (the starts the objectives name are added before: :func:`starts_needed`)."""
    counts = [sum(o in group for o in objectives) for group in (START_COSTS, SPEEDS)]
    unknown = [o for o in objectives if o not in OBJECTIVES]
    if unknown or counts != [1, 1] or len(set(objectives)) != len(objectives):
        raise ConfigError(
            f"bad objectives {','.join(objectives)!r}: one start cost "
            f"({', '.join(START_COSTS)}), one speed ({', '.join(SPEEDS)}), optionally memory"
        )
    if missing := starts_needed(objectives, starts):
        raise ConfigError(f"objective needs {', '.join(missing)} starts measured: add it to "
                          "--starts")  # fmt: skip
    if kind not in ("generate", "continuous") and {"decode", "ttft"} & set(objectives):
        raise ConfigError("objectives decode and ttft need --workload generate or continuous")
    if "goodput" in objectives and kind != "continuous":
        raise ConfigError("objective goodput needs --workload continuous (and its --slo "
                          "targets)")  # fmt: skip
    if "goodput" in objectives and not any(arrivals.slo(slo)):
        raise ConfigError("objective goodput counts the requests that meet --slo: give its "
                          "targets, e.g. --slo ttft=500ms,tpot=50ms")  # fmt: skip


def later_start(objectives: tuple[str, ...]) -> str:
    """The start a ``restarts`` policy counts after the first cold one: the study's own start
    objective when it is a later start (what the user will ship), else ``warm``."""
    chosen = next((o for o in objectives if o in START_COSTS), "compile")
    return "warm" if chosen == "compile" else START_KIND[chosen]


def directions(objectives: tuple[str, ...]) -> list[str]:
    """Optuna's direction of each objective: ``maximize`` for those of :data:`HIGHER`."""
    return ["maximize" if o in HIGHER else "minimize" for o in objectives]


def values(point: Any, objectives: tuple[str, ...]) -> tuple[float, ...]:
    """The value of each objective for a point, as measured (a missing one counts as 0): what
    Optuna is told, in :func:`directions`."""
    return tuple(float(value(point, o) or 0.0) for o in objectives)


def costs(point: Any, objectives: tuple[str, ...]) -> tuple[float, ...]:
    """:func:`values` as a front compares them, each lower-is-better: a :data:`HIGHER`
    objective's negative."""
    return tuple(-v if o in HIGHER else v for o, v in zip(objectives, values(point, objectives),
                                                          strict=True))  # fmt: skip


def value(point: Any, objective: str) -> float | None:
    """One objective's value for a point: a start's cost, or a call's, its goodput, or the
    memory."""
    if objective in START_KIND:
        return point.start_s(START_KIND[objective])
    return getattr(point, ATTRIBUTE[objective])


# The lifetime a study is judged over when no --calls says it, stated in serving time so that it
# means the same on a CPU and a GPU: an hour of calls back to back at eager's measured latency
# (720,000 calls at 5 ms a call, 7,200 at 500 ms). A count of calls would not: 10,000 calls are
# 50 s of serving at 5 ms, where no compile of seconds can ever pay, and 83 min at 500 ms.
DEFAULT_LIFETIME = "1h"
UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}  # amortized:TIME's units
_TIME = re.compile(rf"(.+?)({'|'.join(UNITS)})")


def lifetime(calls: int | None, rate: float | None = None) -> str:
    """The default policy: the lowest time to ready + ``calls`` x latency, and where ``calls``
    is not given, over ``DEFAULT_LIFETIME`` of serving (``amortized:1h``); for requests that
    arrive at ``rate`` a second (a continuous workload's), the requests of that lifetime, each
    costing its time in the server."""
    if not calls and rate:
        calls = round(rate * parse_policy(f"amortized:{DEFAULT_LIFETIME}")[1][0])
    return f"amortized:{calls}" if calls else f"amortized:{DEFAULT_LIFETIME}"


def serving_calls(seconds: float, eager_ms: float) -> float:
    """The calls ``seconds`` of serving make back to back at ``eager_ms`` a call."""
    return seconds * 1e3 / eager_ms


def span(seconds: float) -> str:
    """A length of serving in its largest unit that is at least one: ``1 h``, ``90 min``,
    ``6.2 s``."""
    unit, size = next(((u, v) for u, v in reversed(UNITS.items()) if seconds >= v), ("s", 1.0))
    return f"{seconds / size:.3g} {unit}"


def parse_policy(policy: Any) -> tuple[str, tuple[float, ...]]:
    """``knee`` -> ("knee", ()); ``amortized:1000`` -> ("amortized", (1000.0,));
    ``amortized:1h`` (a lifetime in serving time: s, min, h or d) -> ("serving", (3600.0,));
    ``restarts:50:1000`` -> ("restarts", (50.0, 1000.0)). Numbers are finite and positive;
    STARTS is a whole number of at least 1."""
    usage = ("use knee, fastest, quickest, amortized:CALLS, amortized:TIME (1h, 30min), "
             "restarts:STARTS:CALLS or latency-budget:MS")  # fmt: skip
    if not isinstance(policy, str):
        raise ConfigError(f"bad policy {policy!r}: {usage}")
    name, *args = policy.split(":")
    if name not in POLICIES:
        raise ConfigError(f"bad policy {policy!r}: {usage}")
    wanted = {"amortized": 1, "latency-budget": 1, "restarts": 2}.get(name, 0)
    if len(args) != wanted:
        raise ConfigError(f"bad policy {policy!r}: amortized:CALLS (or TIME) and "
                          "latency-budget:MS take a number, restarts:STARTS:CALLS two, the "
                          "others none")  # fmt: skip
    timed = _TIME.fullmatch(args[0]) if name == "amortized" else None
    try:
        numbers = tuple(float(a) for a in ([timed[1]] if timed else args))
    except ValueError:
        what = "a number of calls or a time (1h, 30min, 3600s)" if name == "amortized" else (
            "a number")  # fmt: skip
        raise ConfigError(f"bad policy {policy!r}: {':'.join(args)!r} is not {what}") from None
    if not all(math.isfinite(v) and v > 0 for v in numbers):
        raise ConfigError(f"bad policy {policy!r}: the numbers must be finite and positive")
    if name == "restarts" and (numbers[0] < 1 or not numbers[0].is_integer()):
        raise ConfigError(f"bad policy {policy!r}: STARTS is a whole number of starts, >= 1")
    if timed:
        return "serving", (numbers[0] * UNITS[timed[2]],)
    return name, numbers
