"""One error root: the CLI turns every ``AutotuneError`` into one line and a non-zero exit."""

from __future__ import annotations


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
