"""Storage URLs: which database a command uses, and the URL as it may be shown (no password).

A password never shows. :func:`mask` parses the URL as SQLAlchemy does and hides its password;
where SQLAlchemy cannot parse it, or would split it at a raw ``@`` inside the password (leaving
the rest of the password in the host), everything between ``://`` and the last ``@`` is masked.
:func:`scrub` removes the password from any other text (a driver's error message).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, unquote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from autotune import variables
from autotune.errors import StorageError

DEFAULT_URL = "sqlite:///studies/autotune.db"  # where $AUTOTUNE_STUDIES is not set
_QUERY_SECRET = re.compile(r"(?i)\b(password|passwd|pwd)=[^&]*")


def resolve_url(url: str | None) -> str:
    """``--storage``, else ``$AUTOTUNE_STORAGE``, else a SQLite file in the studies folder."""
    url = url or variables.storage() or variables.default_storage()
    parsed = _parse(url)
    if parsed is None or (parsed.password is not None and "@" in _credentials(url)):
        raise StorageError(f"malformed storage URL {mask(url)!r}: use a SQLAlchemy URL "
                           "(percent-encode '@', ':' and '/' in the password)")  # fmt: skip
    if parsed.get_backend_name() == "sqlite":
        database = sqlite_path(parsed)
        if database in ("", ":memory:"):
            raise StorageError("a SQLite storage needs a file: sqlite:///path/to/file.db")
        folder = Path(database).parent
        if url != variables.default_storage() and not folder.is_dir():
            raise StorageError(f"storage {url}: folder {folder} does not exist")
    return url


def sqlite_path(parsed: URL) -> str:
    """The file of a SQLite URL (``sqlite:///file:x.db?mode=ro&uri=true`` too)."""
    database = parsed.database or ""
    if str(parsed.query.get("uri", "")).lower() in ("true", "1"):
        database = database.removeprefix("file:")
    return database


def _parse(url: str) -> URL | None:
    try:
        return make_url(url)
    except (ArgumentError, ValueError, TypeError):
        return None


def _credentials(url: str) -> str:
    """The raw text between ``://`` and the last ``@`` ('' when there is none)."""
    _, sep, rest = url.partition("://")
    return rest.rpartition("@")[0] if sep else url.rpartition("@")[0]


def mask(url: str) -> str:
    """The URL with its password replaced by ``***``."""
    parsed = _parse(url)
    creds = _credentials(url)
    if parsed is not None and parsed.password is None:
        shown = url
    elif parsed is not None and "@" not in creds:
        shown = parsed.render_as_string(hide_password=True)
    elif creds:
        scheme, sep, rest = url.partition("://")
        shown = f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if sep else "***@" + rest
    else:
        shown = url
    return _QUERY_SECRET.sub(lambda m: f"{m.group(1)}=***", shown)


def password(url: str) -> str | None:
    """The URL's password: the raw text after the first ':' of its credentials."""
    secret = _credentials(url).partition(":")[2]
    return secret or None


def scrub(text: str, url: str) -> str:
    """Remove the URL's password from any text (error messages, logs): raw, percent-decoded and
    percent-encoded, and each longer piece of one that a raw '@' split."""
    secret = password(url)
    forms = {m.group(0).partition("=")[2] for m in _QUERY_SECRET.finditer(url)} - {""}
    if secret:
        forms |= {secret, unquote(secret), quote(unquote(secret), safe="")}
        forms |= {piece for piece in secret.split("@") if len(piece) >= 4}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, "***")
    return text
