"""What the operator decides when starting ``autotune serve``: the storage, the token, the root
of the model directories a request may name, and the largest request body; and the rule that
only loopback may be served without a token."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from autotune import variables
from autotune.errors import ConfigError

TOKEN_ENV = variables.TOKEN
MIN_TOKEN = 16  # characters: a guessable token is no gate
MAX_BODY = 64 * 1024  # bytes: a spec is a few hundred


def loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost``, ``127.0.0.1``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_token(token: str | None) -> str | None:
    """The token, if it is long enough to be one (None stays None)."""
    if token is not None and len(token) < MIN_TOKEN:
        make = "python -c 'import secrets; print(secrets.token_urlsafe())'"
        raise ConfigError(f"the token has {len(token)} characters: use at least {MIN_TOKEN} "
                          f"(e.g. {make})")  # fmt: skip
    return token


def check_bind(host: str, token: str | None) -> None:
    """Serving anything but loopback needs a token: anyone who reaches the port could
    otherwise submit studies for the workers to run."""
    if not loopback(host) and not token:
        raise ConfigError(f"--host {host} is not loopback: serving it needs a token (--token, "
                          f"or ${TOKEN_ENV})")  # fmt: skip


@dataclass(frozen=True)
class ServiceSettings:
    """The service's settings, checked once. ``storage`` is a URL as given (or None: the
    default rules, ``$AUTOTUNE_STORAGE`` then ``sqlite:///studies/autotune.db``)."""

    storage: str | None = None
    token: str | None = None
    model_root: Path | None = None
    max_body: int = MAX_BODY

    def __post_init__(self) -> None:
        check_token(self.token)
        if self.model_root is not None:
            root = Path(os.path.realpath(self.model_root))
            if not root.is_dir():
                raise ConfigError(f"--model-root {self.model_root}: no such directory")
            object.__setattr__(self, "model_root", root)
        if self.max_body < 1024:
            raise ConfigError(f"--max-body {self.max_body}: at least 1024 bytes")

    @classmethod
    def from_environment(
        cls, storage: str | None, token: str | None, model_root: str | None, max_body: int
    ) -> ServiceSettings:
        """Settings from the command line, the token from ``$AUTOTUNE_TOKEN`` when not given."""
        token = token or variables.token()
        root = Path(model_root) if model_root else None
        return cls(storage, token, root, max_body)
