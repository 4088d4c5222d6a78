"""Errors as the service answers them: one line of JSON, ``{"error": "..."}``.

A bad request gets a 4xx and changes nothing stored (every check runs before the first
write); a database that cannot be reached gets a 503 with ``Retry-After``; nothing gets a
traceback, and no answer or log line holds the storage password (:func:`one_line` scrubs it).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from starlette.exceptions import HTTPException

from autotune.errors import AutotuneError, StorageError, shorten
from autotune.storage import mask, scrub

RETRY_AFTER_S = 5
log = logging.getLogger("autotune.service")


class Refused(HTTPException):
    """A request the service will not serve, with its status and one line saying why."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(status, message, headers)


def one_line(text: Any, url: str) -> str:
    """Text as one line, at most 500 characters, with the storage password removed."""
    line = " ".join(str(text).split())
    return shorten(scrub(line, url), 500)


def answer(status: int, message: str, url: str, headers: dict[str, str] | None = None
           ) -> JSONResponse:  # fmt: skip
    return JSONResponse({"error": one_line(message, url)}, status, headers)


def unavailable(message: str, url: str) -> JSONResponse:
    """The database cannot be reached: try again later."""
    return answer(503, message, url, {"Retry-After": str(RETRY_AFTER_S)})


def validation_line(exc: RequestValidationError | ValidationError) -> str:
    """FastAPI's (or pydantic's) list of validation errors as one line: where, and what."""
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "the request"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "bad request: " + "; ".join(parts)


def install(app: FastAPI, url: str) -> None:
    """Register the handlers that turn every error into one line of JSON."""

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        message = exc.detail if isinstance(exc.detail, str) else "bad request"
        if exc.status_code == 404 and message == "Not Found":
            message = f"no such page: {request.url.path}"
        return answer(exc.status_code, message, url, dict(exc.headers or {}))

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return answer(422, validation_line(exc), url)

    async def refused(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, StorageError):
            log.warning("storage %s: %s", mask(url), one_line(exc, url))
            return unavailable(str(exc), url)
        return answer(400, str(exc), url)

    async def database(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, IntegrityError):  # a concurrent write won: the same study, say
            return answer(409, "a concurrent request wrote the same thing first", url)
        text = str(getattr(exc, "orig", None) or exc)
        log.warning("storage %s: %s", mask(url), one_line(text, url))
        return unavailable(f"storage {mask(url)} cannot be reached: {text}", url)

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(AutotuneError, refused)
    app.add_exception_handler(SQLAlchemyError, database)
