"""The ASGI application: FastAPI routes (:mod:`.api`, :mod:`.pages`) behind the service's
gates (:mod:`.guard`), with every error as one line of JSON (:mod:`.errors`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from autotune.service import api, pages, problems
from autotune.service.context import Service
from autotune.service.guard import Guard
from autotune.service.settings import ServiceSettings

DESCRIPTION = """The studies of one autotune storage: their progress and picks, one study with
its trials and Pareto front, its export, the lookup of the best known compile config for a
model, workload, device and torch, and submitting a study for the workers that serve the queue
(`autotune queue-worker`). Writes need the service's token (`Authorization: Bearer TOKEN`).
Every error is one line: `{"error": "..."}`."""


def create_app(settings: ServiceSettings) -> FastAPI:
    """The service over ``settings.storage`` (reached now: a storage that cannot be reached
    is an ``AutotuneError`` before anything is served)."""
    service = Service(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(service.warm)  # before the first request (about 2 s)
        yield

    app = FastAPI(title="autotune", summary="How should I torch.compile this model, here?",
                  description=DESCRIPTION, version=_version(), docs_url=None, redoc_url=None,
                  lifespan=lifespan)  # fmt: skip
    app.state.service = service
    problems.install(app, service.url)
    app.include_router(api.router(service))
    app.include_router(pages.router(service))
    app.add_middleware(Guard, max_body=settings.max_body, url=service.url)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("autotune")
    except PackageNotFoundError:
        return "0"


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, with its 422 answers described as they are: one line of JSON."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, summary=app.summary,
                             description=app.description, routes=app.routes)  # fmt: skip
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                found = operation.get("responses", {}).get("422")
                if found is not None:
                    found["content"] = {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"}}}  # fmt: skip
        for unused in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(unused, None)
        app.openapi_schema = schema
    return app.openapi_schema
