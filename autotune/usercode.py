"""Code that autotune imports and runs: only what the user named. No code from data.

A model or a backend written ``package.module:function`` is code. autotune imports one only
when the user named it on their own command line (``--model``, ``--backend``, or
``--allow-code``, which takes such names or whole modules) or in their own Python call. A spec
file, a study stored in a database, an exported ``best.json`` or an HTTP request may *name*
code, but naming is not allowing: a command refuses, in one line, code that its user did not
name, and says how to allow it.

Importing puts the current directory first on ``sys.path`` (as ``python -m`` and uvicorn do)
for the import alone, and puts ``sys.path`` back after.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from autotune.errors import ConfigError, shorten

FORM = "package.module:function"


def is_code(name: str) -> bool:
    """Whether a model or backend name is an import path (``package.module:function``)."""
    return isinstance(name, str) and ":" in name


def check_form(name: str, what: str) -> tuple[str, str]:
    """``(module, attribute)`` of an import path; ConfigError when it is not one."""
    module, _, attr = name.partition(":")
    parts = module.split(".") + attr.split(".")
    if not module or not attr or not all(p.isidentifier() for p in parts):
        raise ConfigError(f"bad {what} {name!r}: an import path is written {FORM}")
    return module, attr


@contextlib.contextmanager
def cwd_first() -> Iterator[None]:
    """The current directory first on ``sys.path`` for an import, and ``sys.path`` as it
    was afterwards."""
    saved = list(sys.path)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        yield
    finally:
        sys.path[:] = saved


def resolve(name: str, what: str) -> Callable[..., Any]:
    """Import ``package.module:function`` (a name the user gave) and return the callable."""
    module_name, attr = check_form(name, what)
    try:
        with cwd_first():
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name + ".").startswith(exc.name + "."):
            raise ConfigError(f"{what} {name!r}: no module named {module_name!r} in "
                              f"{os.getcwd()} or on sys.path") from None  # fmt: skip
        failed = f"{what} {name!r}: importing {module_name} failed"
        raise ConfigError(f"{failed}: {line(exc)}") from None
    except Exception as exc:  # the user's module raised while importing
        raise ConfigError(
            f"{what} {name!r}: importing {module_name} failed: {line(exc)}"
        ) from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"{what} {name!r}: module {module_name} has no {attr!r}")
    if not callable(target):
        raise ConfigError(f"{what} {name!r}: {attr} in {module_name} is not callable")
    return target


def allowed(name: str, allow: Iterable[str]) -> bool:
    """Whether ``name`` is among the names the user allowed: itself, or its module (or a
    package above it) given alone."""
    module = name.partition(":")[0]
    return any(a == name or (":" not in a and (module == a or module.startswith(a + ".")))
               for a in allow)  # fmt: skip


def named(spec: Any) -> list[tuple[str, str]]:
    """Every piece of code a study spec names: ``("model", name)`` and ``("backend", name)``."""
    found = [("model", spec.model.name)] if is_code(spec.model.name) else []
    return found + [("backend", b) for b in spec.space.backend if is_code(b)]


def check_allowed(spec: Any, allow: Iterable[str], source: str) -> None:
    """Refuse a spec that names code its user did not name (``source`` says where the spec
    came from: a spec file, a stored study)."""
    allow = list(allow)
    refused = [(what, name) for what, name in named(spec) if not allowed(name, allow)]
    if refused:
        listed = ", ".join(f"{what} {name}" for what, name in refused)
        modules = ",".join(dict.fromkeys(name.partition(":")[0] for _, name in refused))
        raise ConfigError(f"{source} names code that autotune would import and run ({listed}), "
                          f"which this command line does not: allow it with --allow-code "
                          f"{modules}")  # fmt: skip


def line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return shorten(f"{type(exc).__name__}: {text}", 300)
