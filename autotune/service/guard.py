"""The service's gates: the token that every write needs (compared in constant time), and an
ASGI middleware that refuses request bodies over the limit and turns anything unexpected into
one line of JSON (a 503 when the database is behind it), logged without the password."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Annotated, Any

from fastapi import Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from autotune.service.problems import Refused, answer, log, one_line, unavailable
from autotune.service.settings import TOKEN_ENV

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

bearer = HTTPBearer(auto_error=False, description=f"the service's token (--token or ${TOKEN_ENV})")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
CHALLENGE = {"WWW-Authenticate": "Bearer"}


def token_gate(token: str | None) -> Callable[..., None]:
    """A dependency that lets a request through only with ``Authorization: Bearer TOKEN``;
    a service started without a token takes no writes at all."""
    wanted = token.encode() if token else None

    def require(credentials: Credentials = None) -> None:
        if wanted is None:
            raise Refused(403, f"this service takes no writes: its operator started it without "
                          f"a token (--token or ${TOKEN_ENV})")  # fmt: skip
        given = credentials.credentials.encode() if credentials is not None else b""
        if not hmac.compare_digest(given, wanted):
            why = "a wrong token" if credentials is not None else "no token"
            raise Refused(401, f"a write needs the service's token, and this request has {why}: "
                          "send Authorization: Bearer TOKEN", CHALLENGE)  # fmt: skip

    return require


class TooLarge(Refused):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over the limit of {limit} bytes")


class Guard:
    """Pure ASGI middleware: bodies over ``max_body`` bytes get 413 (declared or streamed);
    an exception no handler took gets one line (503 when a database error is behind it)."""

    def __init__(self, app: ASGIApp, max_body: int, url: str) -> None:
        self.app, self.max_body, self.url = app, max_body, url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and not declared.isdigit():
            await _send(send, answer(400, "bad Content-Length header", self.url))
            return
        if declared is not None and int(declared) > self.max_body:
            await _send(send, answer(413, TooLarge(self.max_body).detail, self.url))
            return
        seen, started = 0, False

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise TooLarge(self.max_body)  # FastAPI hands an HTTPException on
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, watched)
        except Exception as exc:
            from autotune.storage.retry import database_error

            if started:
                raise
            found = database_error(exc)
            if found is not None:
                text = str(getattr(found, "orig", None) or found)
                log.warning("database error: %s", one_line(text, self.url))
                await _send(send, unavailable(f"the database failed: {text}", self.url))
                return
            log.error("internal error on %s: %s: %s", scope.get("path"), type(exc).__name__,
                      one_line(exc, self.url))  # fmt: skip
            await _send(send, answer(500, f"internal error ({type(exc).__name__})", self.url))


async def _send(send: Send, response: Any) -> None:
    """Send a whole Starlette response through a raw ASGI ``send``."""
    await send({"type": "http.response.start", "status": response.status_code,
                "headers": response.raw_headers})  # fmt: skip
    await send({"type": "http.response.body", "body": response.body})
