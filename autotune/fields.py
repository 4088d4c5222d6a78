"""Config fields: each setting's default, help text, spec-file key, command-line flag and reader,
written once, on its dataclass field (as optimum-benchmark does). The spec file (TOML), the
command line and the dataclasses all read them from there.

A reader checks a value's type as well as its range and says, in one line, which key was wrong,
what it held and what it should hold: TOML gives typed values, and ``trials = 2.7`` or
``equivalence = "no"`` must be refused, never coerced.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

from autotune.errors import ConfigError

Reader = Callable[[Any, str], Any]  # (value, key) -> the field's value, or ConfigError
_UNITS = {"s": 1, "m": 60, "h": 3600}
_SIZES = {"": 1, "mib": 1, "mb": 1, "gib": 1024, "gb": 1024}


def option(default: Any, help: str, *, toml: str | None = None, flag: str | None = None,
           read: Reader | None = None, cli_type: type | None = None) -> Any:  # fmt: skip
    """A dataclass field with its help text, TOML key (default: its name), command-line flag
    (default: ``--`` and the TOML key with dashes) and reader."""
    metadata = {"help": help, "toml": toml, "flag": flag, "read": read, "cli_type": cli_type}
    return dataclasses.field(default=default, metadata=metadata)


def fields(cls: type) -> Iterator[dataclasses.Field]:
    """The fields of a config dataclass that are options (they carry help text)."""
    return (f for f in dataclasses.fields(cls) if "help" in f.metadata)


def toml_key(f: dataclasses.Field) -> str:
    return f.metadata.get("toml") or f.name


def flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + toml_key(f).replace("_", "-")


def help_text(f: dataclasses.Field) -> str:
    """The help line, with the default."""
    default, words = f.default, f.metadata["help"]
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
    if default in (None, False) or "(default" in words:  # a help that says it itself
        return words
    return f"{words} (default {shown})"


def read(cls: type, given: dict[str, Any], where: str) -> dict[str, Any]:
    """The fields of ``cls`` among ``given`` (by TOML key), each through its reader."""
    out = {}
    for f in fields(cls):
        key = toml_key(f)
        if key in given and given[key] is not None:
            reader = f.metadata.get("read")
            out[f.name] = reader(given[key], f"{where}{key}") if reader else given[key]
    return out


def validate(obj: Any) -> None:
    """Run every option field of a frozen dataclass through its reader, in place: the types
    are checked however the object was built (Python, a spec file, a stored spec)."""
    for f in fields(type(obj)):
        reader = f.metadata.get("read")
        value = getattr(obj, f.name)
        if reader is not None and value is not None:
            object.__setattr__(obj, f.name, reader(value, toml_key(f)))


def _bad(value: Any, key: str, expected: str) -> ConfigError:
    return ConfigError(f"{key} = {value!r}: expected {expected}")


def whole(minimum: int | None = None) -> Reader:
    """A whole number (never a bool or a float), at least ``minimum``."""

    def reader(value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(value, key, "a whole number")
        if minimum is not None and value < minimum:
            raise _bad(value, key, f"a whole number of at least {minimum}")
        return value

    return reader


def positive(value: Any, key: str) -> float:
    """A finite number above zero (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(value, key, "a number above 0")
    if not math.isfinite(value) or value <= 0:
        raise _bad(value, key, "a finite number above 0")
    return float(value)


def text(choices: tuple[str, ...] | None = None) -> Reader:
    """A string, one of ``choices`` when given."""

    def reader(value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise _bad(value, key, "text")
        if choices is not None and value not in choices:
            raise _bad(value, key, f"one of {', '.join(choices)}")
        return value

    return reader


def boolean(value: Any, key: str) -> bool:
    """true or false (TOML's booleans; never a string)."""
    if not isinstance(value, bool):
        raise _bad(value, key, "true or false")
    return value


def texts(value: Any, key: str) -> tuple[str, ...]:
    """A comma list (``cold,warm``) or a list of strings."""
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _bad(value, key, "a comma list or a list of strings")


def parse_duration(text: Any, key: str = "time_budget") -> float | None:
    """``90``, ``90s``, ``30m``, ``2h`` or ``1h30m`` as seconds; ``none`` for no limit."""
    if text is None or (isinstance(text, str) and text.strip().lower() == "none"):
        return None
    if isinstance(text, bool) or not isinstance(text, (int, float, str)):
        raise ConfigError(f"{key} = {text!r}: expected a duration such as 90s, 30m or 2h")
    if isinstance(text, (int, float)) or re.fullmatch(r"\d+(\.\d+)?", text.strip()):
        seconds = float(text)
    elif re.fullmatch(r"((\d+(\.\d+)?)\s*([smh])\s*)+", text.strip().lower()):
        found = re.findall(r"(\d+(\.\d+)?)\s*([smh])", text.lower())
        seconds = sum(float(n) * _UNITS[u] for n, _, u in found)
    else:
        raise ConfigError(f"bad duration {text!r}: write e.g. 90s, 30m, 2h or 1h30m")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"bad duration {text!r}: it must be above 0")
    return seconds


def parse_memory(text: Any, key: str = "max_memory") -> float | None:
    """``8GiB``, ``512MiB`` or a number of MiB, as MiB."""
    if text is None:
        return None
    if isinstance(text, bool) or not isinstance(text, (int, float, str)):
        raise ConfigError(f"{key} = {text!r}: expected a size such as 8GiB or 512MiB")
    if isinstance(text, (int, float)):
        mib = float(text)
    else:
        match = re.fullmatch(r"(\d+(\.\d+)?)\s*([a-z]*)", text.strip().lower())
        if not match or match.group(3) not in _SIZES:
            raise ConfigError(f"bad memory size {text!r}: write e.g. 8GiB or 512MiB")
        mib = float(match.group(1)) * _SIZES[match.group(3)]
    if not math.isfinite(mib) or mib <= 0:
        raise ConfigError(f"bad memory size {text!r}: it must be above 0")
    return mib
