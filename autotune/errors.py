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
