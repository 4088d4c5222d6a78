"""One error root: the CLI turns every ``AutotuneError`` into one line and a non-zero exit."""

from __future__ import annotations

import re
from collections.abc import Callable

_FRAME = r"(?:user code )?[^\s;()]+:\d+ in [^\s;()]+"  # ``file:line in function``
_PLACE = re.compile(rf" \(at {_FRAME}(?:; {_FRAME})*\)")  # what :func:`where` names
_LISTING = " from user code: "  # Dynamo's listing of the user code it was tracing
_ROOM = 32  # the fewest characters of a message kept beside its place (or a third)


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters: cut at a word, never inside one, with
    an ellipsis where it was cut (the whole text stays where it is kept: ``autotune show``).

    A failure's place (`` (at file:line in function; ...)``, as :func:`where` names it) is kept
    whole and the message beside it is cut instead; where the place names Dynamo's user code,
    Dynamo's own listing of that code goes first. A place that would leave the message less
    than a third of ``limit`` is named shorter (the innermost frame and the user code's, then
    files by their names alone)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    found = list(_PLACE.finditer(text))
    if found:
        place = found[-1]
        message = (text[: place.start()] + text[place.end() :]).strip()
        listed = "user code " in place.group() and _LISTING in message
        message = message.split(_LISTING)[0] if listed else message
        room = min(len(message) + 1, max(_ROOM, limit // 3))  # the message's share, at least
        for named in _shorter(place.group()):
            if limit - len(named) >= room:
                return _cut(message, limit - len(named), listed) + named
    return _cut(text, limit)


def _cut(text: str, limit: int, cut: bool = False) -> str:
    """``text`` in ``limit`` characters, cut at a word with an ellipsis (``cut``: a part of it
    was dropped already, so the ellipsis is due anyway)."""
    if len(text) <= limit and not cut:
        return text
    if len(text) < limit:
        return text.rstrip(" ,;:") + "…"
    kept = text[: limit - 1]
    if " " in kept and not text[limit - 1].isspace():
        kept = kept[: kept.rindex(" ")]
    return kept.rstrip(" ,;:") + "…"


def _shorter(place: str) -> list[str]:
    """A place, then the same ever shorter: the innermost frame and the user code's; the same
    with each file by its name alone; the innermost frame alone, by its file's name."""
    frames = place.removeprefix(" (at ").removesuffix(")").split("; ")
    user = [f for f in frames[1:] if f.startswith("user code ")][:1]
    forms = [frames, frames[:1] + user]
    forms += [[re.sub(r"[^\s;()]*/", "", f) for f in form] for form in (forms[1], frames[:1])]
    return list(dict.fromkeys(f" (at {'; '.join(form)})" for form in forms))


def where(exc: BaseException, frames: int = 2) -> str:
    """Where a failure arose: the innermost ``frames`` frames of its innermost cause that are
    neither autotune's nor the standard library's (a backend's, a model's, torch's own), as
    ``file:line in function``, innermost first, each file named from the folder it was imported
    from (``openvino/frontend/...``, ``tests/models.py``); then, for a failure Dynamo met while
    tracing, the line of the user code it was tracing (``user code file:line in function``, the
    model's own: :func:`_user_code`); "" when there are none."""
    import traceback

    inner = exc
    chain = [exc]
    while True:  # an explicit cause, or the one being handled unless it was suppressed
        cause = inner.__cause__ or (None if inner.__suppress_context__ else inner.__context__)
        if cause is None or cause is inner or cause.__traceback__ is None:
            break
        inner = cause
        chain.append(inner)
    shown = _shown_path()
    found = []
    for frame in reversed(traceback.extract_tb(inner.__traceback__)):
        path = shown(frame.filename)
        if path is None:
            continue
        found.append(f"{path}:{frame.lineno} in {frame.name}")
        if len(found) == frames:
            break
    user = next((u for e in chain if (u := _user_code(e))), None)
    if user is not None and (path := shown(user[0], ours=True)) is not None:
        named = f"{path}:{user[1]} in {user[2]}"
        if named not in found:
            found.append(f"user code {named}")
    return "; ".join(found)


def _user_code(exc: BaseException) -> tuple[str, int, str] | None:
    """The frame of the user code Dynamo was tracing when ``exc`` arose (file, line,
    function): the innermost outside torch's own modules (the model's line that called
    ``nn.LayerNorm``, not LayerNorm's), else the innermost. From the frames Dynamo keeps on the
    exception, else from its message's ``from user code:`` listing (an error Dynamo wrapped
    keeps only the text); None for other errors."""
    import os
    import sys

    stack = getattr(exc, "real_stack", None)
    frames = [(f.filename, int(f.lineno), f.name) for f in stack or () if f.lineno is not None]
    if not frames:
        listing = str(exc).partition("from user code:")[2]
        found = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', listing)
        frames = [(path, int(line), name) for path, line, name in found]
    torch = sys.modules.get("torch")
    own = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep if torch else None
    outside = [f for f in frames if not (own and os.path.abspath(f[0]).startswith(own))]
    return (outside or frames or [None])[-1]


def _shown_path() -> Callable[..., str | None]:
    """A function naming a frame's file as :func:`where` does (``None``: a frame it skips:
    generated code, the standard library's and, unless ``ours``, autotune's own)."""
    import os
    import sys
    import sysconfig

    paths = sysconfig.get_paths()
    mine = os.path.dirname(os.path.abspath(__file__)) + os.sep  # autotune's package
    stdlib = {os.path.abspath(paths[k]) + os.sep for k in ("stdlib", "platstdlib")}
    sites = {os.path.abspath(paths[k]) + os.sep for k in ("purelib", "platlib")}
    roots = sorted(sites | {os.path.join(os.path.abspath(p), "") for p in sys.path},
                   key=len, reverse=True)  # fmt: skip

    def shown(filename: str, ours: bool = False) -> str | None:
        if filename.startswith("<"):  # <frozen ...>, FX's generated <eval_with_key>
            return None
        path = os.path.abspath(filename)
        std = any(path.startswith(s) for s in stdlib) and not any(
            path.startswith(s) for s in sites
        )
        if (path.startswith(mine) and not ours) or std:
            return None
        return next((path[len(r) :] for r in roots if len(r) > 1 and path.startswith(r)), path)

    return shown


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
