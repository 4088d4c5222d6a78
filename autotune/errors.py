"""One error root: the CLI turns every ``AutotuneError`` into one line and a non-zero exit."""

from __future__ import annotations


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters: cut at a word, never inside one, with
    an ellipsis where it was cut (the whole text stays where it is kept: ``autotune show``)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut and not text[limit - 1].isspace():
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:") + "…"


def where(exc: BaseException, frames: int = 2) -> str:
    """Where a failure arose: the innermost ``frames`` frames of its innermost cause that are
    neither autotune's nor the standard library's (a backend's, a model's, torch's own), as
    ``file:line in function``, innermost first, each file named from the folder it was imported
    from (``openvino/frontend/...``, ``tests/models.py``); "" when there are none."""
    import os
    import sys
    import sysconfig
    import traceback

    inner = exc
    while True:  # an explicit cause, or the one being handled unless it was suppressed
        cause = inner.__cause__ or (None if inner.__suppress_context__ else inner.__context__)
        if cause is None or cause is inner or cause.__traceback__ is None:
            break
        inner = cause
    paths = sysconfig.get_paths()
    ours = os.path.dirname(os.path.abspath(__file__)) + os.sep  # autotune's package
    stdlib = {os.path.abspath(paths[k]) + os.sep for k in ("stdlib", "platstdlib")}
    sites = {os.path.abspath(paths[k]) + os.sep for k in ("purelib", "platlib")}
    roots = sorted(sites | {os.path.join(os.path.abspath(p), "") for p in sys.path},
                   key=len, reverse=True)  # fmt: skip
    found = []
    for frame in reversed(traceback.extract_tb(inner.__traceback__)):
        if frame.filename.startswith("<"):  # <frozen ...>, FX's generated <eval_with_key>
            continue
        path = os.path.abspath(frame.filename)
        std = any(path.startswith(s) for s in stdlib) and not any(
            path.startswith(s) for s in sites
        )
        if path.startswith(ours) or std:
            continue
        shown = next((path[len(r) :] for r in roots if len(r) > 1 and path.startswith(r)), path)
        found.append(f"{shown}:{frame.lineno} in {frame.name}")
        if len(found) == frames:
            break
    return "; ".join(found)


class AutotuneError(Exception):
    """Base of every error autotune reports to a user (never a bug in autotune itself)."""

    exit_code = 2


class ConfigError(AutotuneError):
    """Bad input: an unknown model, a bad dtype or device, a backend this torch lacks, ..."""


class NotApplicable(AutotuneError):
    """A strategy that cannot run here (CUDA-only choice on a CPU, no repeated blocks, ...)."""


class AutotuneWarning(UserWarning):
    """Base of every warning autotune gives: something did not go as asked, and autotune says
    in one line what it does instead (filter this one class to see or silence them all)."""


class CacheWarning(AutotuneWarning):
    """A shipped artefact was not loaded: the compile goes on cold."""


class StorageError(AutotuneError):
    """The study database cannot be reached or read."""

    transient = False  # a lost connection, which a running search waits out
