"""Inductor's modes and autotune's option switches.

A switch (:data:`SWITCHES`) is a small dict of ``torch._inductor`` options with a name. A mode
is itself a bundle of options (``torch._inductor.list_mode_options``), so a mode plus switches
is one options dict, and two spellings of one dict are one strategy: ``default`` with
``max_autotune`` is ``max-autotune-no-cudagraphs`` (:func:`spell`).
"""

from __future__ import annotations

from typing import Any

from autotune.errors import ConfigError
from autotune.strategy import torch_facts


def inductor_modes() -> dict[str, dict[str, Any]]:
    """Inductor's modes and the options each one sets (torch's constants, see
    :mod:`autotune.strategy.torch_facts`). Callers must not change the dict."""
    return torch_facts.inductor()[0]


# Inductor's own modes in every torch this runs on (a test checks each): a name among them is
# known without reading torch's facts.
BUILTIN_MODES = (
    "default",
    "reduce-overhead",
    "max-autotune",
    "max-autotune-no-cudagraphs",
    "lite",
)


def is_mode(mode: str) -> bool:
    """Whether ``mode`` is one of Inductor's modes in the running torch (its own known at once)."""
    return mode in BUILTIN_MODES or mode in inductor_modes()


# Inductor option switches: name -> the options it sets. Validated against list_options().
SWITCHES: dict[str, dict[str, Any]] = {
    "freezing": {"freezing": True},  # folds weights into constants: inference only
    "cpp_wrapper": {"cpp_wrapper": True},
    "max_autotune": {"max_autotune": True, "coordinate_descent_tuning": True},
    "cudagraphs": {"triton.cudagraphs": True},  # CUDA only
}
ONLY_UNDER_MODE = {"max_autotune": "default"}  # a switch that other modes imply or exclude
INFERENCE_ONLY = ("freezing",)


def inductor_options() -> frozenset[str]:
    """Every option name Inductor accepts in the running torch."""
    return torch_facts.inductor()[1]


def check_switches(names: tuple[str, ...] | list[str]) -> None:
    """Raise ``ConfigError`` for a switch that is unknown or that this torch cannot set."""
    for name in names:
        if name not in SWITCHES:
            raise ConfigError(f"unknown option {name!r}: use {', '.join(SWITCHES)} or none")
        missing = set(SWITCHES[name]) - inductor_options()
        if missing:
            raise ConfigError(f"option {name!r} needs Inductor options {', '.join(missing)}, "
                              f"which torch {torch_version()} does not have")  # fmt: skip


def _subset(small: dict[str, Any], big: dict[str, Any]) -> bool:
    return all(k in big and big[k] == v for k, v in small.items())


def merged(mode: str, switches: tuple[str, ...]) -> dict[str, Any]:
    """The Inductor options a mode and switches amount to."""
    options = dict(inductor_modes().get(mode, {}))
    for name in switches:
        options.update(SWITCHES[name])
    return options


def spell(options: dict[str, Any], mode: str = "default") -> tuple[str, tuple[str, ...]]:
    """The canonical (mode, switches) of an options dict: the largest mode bundle it contains,
    plus the switches that bundle does not imply. Raises ``ConfigError`` if no mode and
    switches make exactly ``options``."""
    modes = inductor_modes()
    fits = [m for m, o in modes.items() if _subset(o, options)]
    best = max(fits, key=lambda m: (len(modes[m]), m == mode), default="default")
    names = tuple(
        n for n, o in SWITCHES.items() if _subset(o, options) and not _subset(o, modes[best])
    )
    if merged(best, names) != options:
        raise ConfigError(f"Inductor options {options} are not a mode plus autotune's options "
                          f"({', '.join(SWITCHES)})")  # fmt: skip
    return best, names


def torch_version() -> str:
    import torch

    return str(torch.__version__)
