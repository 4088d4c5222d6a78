"""Arrivals: when each request of a continuous workload reaches the server, in seconds from
the start, and the targets its goodput counts (``--slo``). Exactly one source a workload: a
traffic file whose rows give ``arrival_s`` (``arrival_ms``) from the start or a ``timestamp``
(ISO 8601 or epoch seconds; ``timestamp_ms``, a number), made relative to the first row;
``--rate R``, Poisson arrivals seeded as :func:`autotune.traffic.draw`'s spreads are; or
``--concurrency C``, a closed loop (none). The prompts and answers are a generate traffic's,
one sequence a request. A bad row is refused in one line naming it; so are arrivals longer
than a trial can replay (:data:`MAX_SPAN_S`)."""

from __future__ import annotations

import bisect
import math
import random
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import autotune.traffic
from autotune.errors import ConfigError
from autotune.traffic.files import ANSWER, column, request, rows

ARRIVAL = "arrival_s"  # a row's arrival, seconds from the start
TIMESTAMP = "timestamp"  # a row's arrival as a trace stamps it (any case: Azure's TIMESTAMP)
# A row's arrival's spellings, each one's unit in seconds: from the start, or stamps (from the
# first row): epoch seconds or ISO 8601; ms, as Mooncake stamps from its start
FROM_START = {ARRIVAL: 1.0, "arrival_ms": 1e-3}
STAMPS = {TIMESTAMP: 1.0, "timestamp_ms": 1e-3}
SPELLINGS = {**FROM_START, **STAMPS}
SOURCES = ("a --traffic file whose rows give arrival_s or timestamp, --rate R (Poisson "
           "arrivals, R requests a second) or --concurrency C (a closed loop)")  # fmt: skip
# The last arrival a trial replays (s from the start). A trial serves its traffic at least 20
# times in one start's process: the first pass of eager and of the strategy, 3 warm-up rounds
# of both (Settings.warmup), 6 timed rounds of both, the fewest whose sign test can show a
# speedup (autotune.trial.timing.deciding_rounds); each pass lasts until its last arrival at
# least, and the process stops at its timeout (Settings.timeout_s, 1200 s): 60 s a pass.
MAX_SPAN_S = 60.0
SLO_KEYS = ("ttft", "tpot")  # time to first token, time per output token
_MS = {"ms": 1.0, "s": 1000.0}
_SLO_RULE = "targets such as ttft=500ms,tpot=50ms (ttft and/or tpot, each in ms or s)"


class Traffic(tuple):  # type: ignore[type-arg]
    """A traffic file's requests as :func:`autotune.traffic.read_file` reads them, with each
    one's arrival where the file gives them (empty where it gives none), and the refusal a
    continuous workload meets over them (``problem``; "" where none): another workload reads
    the same file and leaves its arrival columns alone."""

    path: str
    arrivals: tuple[float, ...]
    problem: str

    def __new__(cls, requests: Any, path: str = "", arrivals: tuple[float, ...] = (),
                problem: str = "") -> Traffic:  # fmt: skip
        made = super().__new__(cls, requests)
        made.path, made.arrivals, made.problem = path, tuple(arrivals), problem
        return made


def read(value: Any, key: str) -> tuple[tuple[int, ...], ...]:
    """The workload's traffic reader: a file's path (read with its arrivals: a
    :class:`Traffic`), a traffic already read, or :func:`autotune.traffic.read`'s requests."""
    if isinstance(value, Traffic):
        return value
    if isinstance(value, str):
        return read_file(value)
    return autotune.traffic.read(value, key)


def read_file(path: str, requests: int | None = None) -> Traffic:
    """A traffic file's requests, its first ``requests`` where given (``ConfigError`` for what
    any workload refuses), with each row's arrival and what a continuous workload refuses in
    it (one line naming the line)."""
    found = rows(path, requests)
    played = tuple(request(f"--traffic {path} line {n}", row)
                   for n, row in found)  # fmt: skip
    try:
        return Traffic(played, path, _arrivals(path, found, played))
    except ConfigError as exc:
        return Traffic(played, path, (), str(exc))


def _arrivals(path: str, found: list[tuple[int, dict[str, Any]]],
              requests: tuple[tuple[int, ...], ...]) -> tuple[float, ...]:  # fmt: skip
    """Each row's arrival in seconds from the start (none where the file gives none);
    ``ConfigError`` at the first row a continuous workload refuses."""
    stamps = [_when(f"--traffic {path} line {n}", row) for n, row in found]
    spelled = next((s for s, _ in stamps if s), None)
    answered = any(len(r) > 2 for r in requests)
    seconds: list[float] = []
    for (n, _), (spelling, at), asked in zip(found, stamps, requests, strict=True):
        where = f"--traffic {path} line {n}"
        if asked[0] != 1:
            raise ConfigError(f"{where}: batch_size {asked[0]}: a continuous request is one "
                              "sequence (batch_size 1)")  # fmt: skip
        if answered and len(asked) < 3:
            raise ConfigError(f"{where}: no answer ({' or '.join(ANSWER)}), "
                              "where other rows give theirs")  # fmt: skip
        if spelled is None:
            continue
        if spelling is None or at is None:
            raise ConfigError(f"{where}: no arrival ({spelled}), where other rows give "
                              "theirs")  # fmt: skip
        if spelling != spelled:
            raise ConfigError(f"{where}: {spelling}, where other rows give {spelled}: one "
                              "spelling of the arrival a file")  # fmt: skip
        if seconds and at < seconds[-1]:
            raise ConfigError(f"{where}: arrives {seconds[-1] - at:.6g} s before the row above "
                              "it: rows go in arrival order")  # fmt: skip
        seconds.append(at)
    start = seconds[0] if spelled in STAMPS else 0.0
    return tuple(round(s - start, 6) for s in seconds)


def _when(where: str, row: dict[str, Any]) -> tuple[str | None, float | None]:
    """A row's arrival column (its spelling, one of :data:`SPELLINGS`, or None) and its value
    in seconds (a timestamp's from the epoch; None where the column is there but empty)."""
    keys = {column(k): k for k in row}
    given = [s for s in SPELLINGS if s in keys]
    if len(given) > 1:
        raise ConfigError(f"{where}: both {' and '.join(given)}, two spellings of one arrival: "
                          "give one")  # fmt: skip
    if not given:
        return None, None
    spelling, value = given[0], row[keys[given[0]]]
    if value is None or (isinstance(value, str) and not value.strip()):
        return spelling, None
    if spelling == TIMESTAMP:
        return TIMESTAMP, _timestamp(where, value)
    unit = "seconds" if SPELLINGS[spelling] == 1 else "milliseconds"
    number = _number(value)
    if spelling in FROM_START and (number is None or number < 0):
        raise ConfigError(f"{where}: {spelling} = {value!r}, expected {unit} from the start, "
                          "at least 0")  # fmt: skip
    if number is None:
        raise ConfigError(f"{where}: {spelling} = {value!r}, expected a number of {unit}")
    return spelling, number * SPELLINGS[spelling]


def _number(value: Any) -> float | None:
    """A finite number, or its text (a CSV's cell); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _timestamp(where: str, value: Any) -> float:
    """A trace's timestamp as seconds from the epoch: epoch seconds, or ISO 8601 (a space or
    ``T``; ``Z`` or an offset; without one, UTC)."""
    number = _number(value)
    if number is not None:
        return number
    try:
        stamp = datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise ConfigError(f"{where}: {TIMESTAMP} {value!r} is neither ISO 8601 (2023-11-16 "
                          "18:15:46.6805) nor epoch seconds") from None  # fmt: skip
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def poisson(requests: int, rate: float, seed: int = 0) -> tuple[float, ...]:
    """Arrivals of a Poisson process of ``rate`` requests a second, the first at 0: gaps
    drawn exponentially from their own seeded stream (not the prompts': a prompt's length says
    nothing of its gap), rounded to the microsecond."""
    rng = random.Random(f"arrivals {seed}")
    at, found = 0.0, []
    for i in range(requests):
        at += rng.expovariate(rate) if i else 0.0
        found.append(round(at, 6))
    return tuple(found)


def slo(text: str, key: str = "--slo") -> tuple[float | None, float | None]:
    """``ttft=500ms,tpot=50ms`` as ``(ttft_ms, tpot_ms)``, each None where not given (``""``:
    no target); ms or s (``ttft=0.5s``); ``ConfigError`` in one line for anything else."""
    if not isinstance(text, str):
        raise ConfigError(f"{key} = {text!r}: expected {_SLO_RULE}")
    found: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = re.fullmatch(r"([a-z_]+)\s*=\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)", part.lower())
        if not match:
            raise ConfigError(f"{key} = {text!r}: {part!r} is not NAME=TIME: expected "
                              f"{_SLO_RULE}")  # fmt: skip
        name, value = match[1], float(match[2]) * _MS[match[3]]
        if name not in SLO_KEYS or name in found:
            why = "given twice" if name in found else "is no target"
            raise ConfigError(f"{key} = {text!r}: {name} {why}: expected {_SLO_RULE}")
        if value <= 0:
            raise ConfigError(f"{key} = {text!r}: {name} must be above 0")
        found[name] = value
    return found.get("ttft"), found.get("tpot")


def slo_text(value: Any, key: str) -> str:
    """A config reader for ``--slo``: the text, checked by :func:`slo`."""
    slo(value, key)
    return value.strip()


def check(kind: str, traffic: Any, given: tuple[float, ...], rate: float | None,
          concurrency: int | None, targets: str) -> tuple[float, ...]:  # fmt: skip
    """A workload's arrivals before its requests are drawn: the file's (``traffic`` as
    :func:`read` read it) or those ``given`` (a stored study's); ``ConfigError`` in one line
    unless a continuous workload has exactly one source, or where another has any."""
    if kind != "continuous":
        if rate is not None or concurrency is not None or targets or given:
            raise ConfigError("--rate, --concurrency, --slo and arrivals are the continuous "
                              "workload's (--workload continuous)")  # fmt: skip
        return ()
    if getattr(traffic, "problem", ""):
        raise ConfigError(traffic.problem)
    found = getattr(traffic, "arrivals", ())
    if rate is not None and concurrency is not None:
        raise ConfigError("give --rate or --concurrency, not both: arrivals at a rate, or a "
                          "closed loop")  # fmt: skip
    if found and (rate is not None or concurrency is not None):
        raise ConfigError(f"--traffic {traffic.path} gives each request's arrival: drop "
                          f"--{'rate' if rate is not None else 'concurrency'}, or give a file "
                          f"without {' or '.join(SPELLINGS)}")  # fmt: skip
    if given and (found or concurrency is not None):
        beside = "a file that gives its own" if found else "--concurrency: a closed loop has none"
        raise ConfigError(f"arrivals given beside {beside}")
    for n, at in enumerate(given, 1):
        before = given[n - 2] if n > 1 else 0.0
        if _number(at) is None or isinstance(at, str) or at < before:
            raise ConfigError(f"arrivals request {n}: {at!r}, expected seconds from the start, "
                              "at least 0 and in order")  # fmt: skip
    if not (found or given or rate is not None or concurrency is not None):
        raise ConfigError(f"--workload continuous needs its arrivals: {SOURCES}")
    return tuple(float(at) for at in found or given)


def settle(traffic: tuple[tuple[int, ...], ...], known: tuple[float, ...],
           rate: float | None, path: str = "") -> tuple[float, ...]:  # fmt: skip
    """A continuous workload's arrivals for its requests as drawn or read: ``known`` (a file's
    first requests', as ``--requests`` cuts them), else drawn at ``rate``, else none (a closed
    loop); ``ConfigError`` for a request of more than one sequence, and for a file's (``path``)
    or a rate's arrivals past :data:`MAX_SPAN_S` (a stored study's are as it played them)."""
    for n, (batch, *_) in enumerate(traffic, 1):
        if batch != 1:
            raise ConfigError(f"traffic request {n}: batch_size {batch}: a continuous request "
                              "is one sequence (batch_size 1)")  # fmt: skip
    if known:
        if len(known) < len(traffic):
            raise ConfigError(f"arrivals: {len(known)} for {len(traffic)} requests")
        played = known[: len(traffic)]
        if path:
            _fits(played, f"--traffic {path}", lambda n: (
                f"--requests {n} takes the first {n}, which fit" if n else "none of its first "
                "requests fits") + "; and if its stamps are milliseconds (Mooncake's are), name "
                "the column timestamp_ms")  # fmt: skip
        return played
    if rate is None:
        return ()
    drawn = poisson(len(traffic), rate)
    _fits(drawn, f"--rate {rate:g}", lambda n: f"a higher --rate, or --requests {n}, fits")
    return drawn


def _fits(arrivals: tuple[float, ...], source: str, fix: Callable[[int], str]) -> None:
    """``ConfigError`` in one line where the last of ``arrivals`` comes past
    :data:`MAX_SPAN_S`, saying ``fix`` of how many first requests fit."""
    if not arrivals or arrivals[-1] <= MAX_SPAN_S:
        return
    raise ConfigError(f"{source}: its {len(arrivals):,} requests arrive over "
                      f"{arrivals[-1]:,.6g} s, longer than the {MAX_SPAN_S:g} s a trial can "
                      "replay (it serves them at least 20 times in a start's 1200 s): "
                      f"{fix(bisect.bisect_right(arrivals, MAX_SPAN_S))}")  # fmt: skip


def label(rate: float | None, concurrency: int | None) -> str:
    """A study slug's word for the arrivals: ``-rate40``, ``-c4``, or "" (a file's)."""
    if rate is not None:
        return f"-rate{rate:g}"
    return f"-c{concurrency}" if concurrency is not None else ""


def describe(arrivals: tuple[float, ...], rate: float | None, concurrency: int | None,
             targets: str) -> str:  # fmt: skip
    """The arrivals in a few words, as a workload's one line shows them."""
    if concurrency is not None:
        words = f"closed loop of {concurrency} in flight"
    elif rate is not None:
        words = f"Poisson arrivals at {rate:g}/s"
    else:
        words = f"arrivals over {arrivals[-1]:.3g} s" if arrivals else "arrivals"
    return words + (f" · SLO {targets}" if targets else "")


def rate_of(workload: Any) -> float | None:
    """Requests a second a continuous workload arrives at: its ``--rate``, else its arrivals'
    (requests over their span); None for a closed loop and the other workloads."""
    w = workload
    if w.kind != "continuous" or not w.arrivals:
        return None
    if w.rate:
        return float(w.rate)
    span = w.arrivals[-1] - w.arrivals[0]
    return (len(w.arrivals) - 1) / span if span > 0 else None
