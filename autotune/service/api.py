"""The JSON API: the studies, one study, its export and cache artefact, the lookup of the best
known config, and submitting a study (the one write: it needs the token)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from autotune.search.spec import NAME, NAME_CHARS, check_name
from autotune.service import lookup, views
from autotune.service.cache import MISSING
from autotune.service.context import Service
from autotune.service.guard import token_gate
from autotune.service.problems import Refused, validation_line
from autotune.service.schemas import (
    Error,
    Health,
    LookupReply,
    SpecBody,
    Studies,
    Study,
    Submitted,
)

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Error, "description": what} for code, what in (
        (400, "a bad request (one line says why)"), (404, "no such study or answer"),
        (413, "the body is over the limit"), (422, "the request does not fit the schema"),
        (503, "the database cannot be reached: retry after Retry-After seconds"),
    )
}  # fmt: skip
WRITE_ERRORS = {**ERRORS, **{c: {"model": Error} for c in (401, 403, 409)}}
Name = Annotated[str, PathParam(pattern=f"^{NAME.pattern}$", max_length=NAME_CHARS,
                                description="a study name")]  # fmt: skip
FORMATS = Literal["accelerate", "accelerate-yaml", "torch", "transformers"]
EXPORTED: dict[int | str, dict[str, Any]] = {200: {"content": {
    "application/json": {"schema": {"type": "object"}},
    "application/yaml": {"schema": {"type": "string"}},
}}}  # fmt: skip
DOWNLOAD: dict[int | str, dict[str, Any]] = {200: {"content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
}}}  # fmt: skip


def inline(schema: Any, defs: dict[str, Any] | None = None) -> Any:
    """A JSON schema with its ``$defs`` written in place (OpenAPI has no use for them)."""
    if defs is None and isinstance(schema, dict):
        defs = schema.get("$defs", {})
        schema = {k: v for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, dict):
        ref = schema.get("$ref", "")
        if ref.startswith("#/$defs/"):
            return inline(defs[ref.rpartition("/")[2]], defs)
        return {k: inline(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [inline(v, defs) for v in schema]
    return schema


SPEC_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": inline(SpecBody.model_json_schema())}}}}  # fmt: skip


def study_name(name: str) -> str:
    check_name(name)  # ".." and the like: one line, 400
    return name


def router(service: Service) -> APIRouter:
    """The ``/api`` routes over ``service``'s store."""
    api = APIRouter(prefix="/api", responses=ERRORS)
    store, cache = service.store, service.cache

    @api.get("/health", response_model=Health)
    def health() -> dict[str, Any]:
        """Whether the service reaches its database (a 503 when it does not)."""
        return {"status": "ok", "storage": service.shown, "studies": len(store.studies())}

    @api.get("/studies", response_model=Studies)
    def studies() -> dict[str, Any]:
        """Every study: progress, live workers, the current pick and the last activity."""
        rows = cache.get("index", lambda: views.summaries(store))
        return {"storage": service.shown, "studies": views.with_live(rows, store)}

    @api.get("/studies/{name}", response_model=Study)
    def study(name: Name) -> dict[str, Any]:
        """One study with its trials and Pareto front."""
        name = study_name(name)
        found = cache.get(("study", name), lambda: views.detail(store, name))
        return views.with_live([found], store)[0]

    @api.get("/studies/{name}/export", responses=EXPORTED, response_class=Response)
    def export(
        name: Name, policy: Annotated[str | None, Query(max_length=64)] = None,
        format: FORMATS = "accelerate", max_memory: Annotated[str | None, Query()] = None,
    ) -> Response:  # fmt: skip
        """The study's chosen config under ``policy`` (default: the study's) in ``format``,
        as ``autotune export`` writes it; JSON formats name the cache artefact to download."""
        from autotune.service.exports import document

        text, media = document(store, study_name(name), policy, format, max_memory)
        return Response(text, media_type=media)

    @api.get("/studies/{name}/artifact", response_class=FileResponse, responses=DOWNLOAD)
    def artifact(
        name: Name, policy: Annotated[str | None, Query(max_length=64)] = None
    ) -> FileResponse:
        """The chosen strategy's compile-cache artefact (``best.cache.bin``), where it was
        kept on this machine."""
        from autotune.service.exports import artefact_path

        path, digest = artefact_path(store, study_name(name), policy)
        return FileResponse(path, media_type="application/octet-stream",
                            filename="best.cache.bin", headers={"X-Sha256": digest})  # fmt: skip

    @api.get("/lookup", response_model=LookupReply, responses={404: {"model": Error}})
    async def find(
        model: Annotated[str, Query(min_length=1, max_length=512)],
        device: Literal["cpu", "cuda"],
        layers: Annotated[int | None, Query(ge=1)] = None,
        workload: Literal["inference", "train", "generate"] = "inference",
        batch_size: Annotated[int, Query(ge=1)] = 1,
        seq_len: Annotated[int, Query(ge=1)] = 32,
        dtype: Literal["float32", "bfloat16", "float16"] = "float32",
        new_tokens: Annotated[int, Query(ge=2)] = 32,
        device_name: Annotated[str | None, Query(max_length=256)] = None,
        torch: Annotated[str | None, Query(max_length=64)] = None,
        exported: bool = False,
        triton: Annotated[str | None, Query(max_length=64)] = None,
        cuda: Annotated[str | None, Query(max_length=64)] = None,
        capability: Annotated[str | None, Query(max_length=16)] = None,
        cpu_isa: Annotated[str | None, Query(max_length=32)] = None,
        float32_matmul_precision: Literal["highest", "high", "medium"] | None = None,
        device_index: Annotated[int | None, Query(ge=0, le=1024)] = None,
    ) -> dict[str, Any]:
        """The best known config for a model, workload, device (kind and name) and torch;
        404 when no study has one (with ``exported``: no finished, exported one). Given any of
        the asker's torch, Triton, CUDA, capability, CPU ISA, float32 matmul precision or
        device index, ``fits`` says whether each artefact of the pick would hit there (what
        ``autotune check`` says of a file)."""
        q = lookup.Query(model, device, layers, workload, batch_size, seq_len, dtype, new_tokens,
                         device_name, torch)  # fmt: skip
        found = cache.peek(("lookup", q))  # the common case: answered on the event loop
        if found is MISSING:
            found = await run_in_threadpool(cache.get, ("lookup", q),
                                            lambda: lookup.lookup(store, q))  # fmt: skip
        if found is None or (exported and not found["exported"]):
            what = "an exported answer" if exported else "an answer"
            raise Refused(404, f"no study of {q.describe()} has {what} yet: submit one "
                          "(POST /api/studies)")  # fmt: skip
        given = {"torch": torch, "triton": triton, "cuda": cuda, "device_name": device_name,
                 "capability": capability, "cpu_isa": cpu_isa, "device_index": device_index,
                 "float32_matmul_precision": float32_matmul_precision}  # fmt: skip
        asker = {k: v for k, v in given.items() if v is not None}
        if set(asker) - {"torch", "device_name"}:  # the plain lookup stays on the fast path
            fits = await run_in_threadpool(lookup.artefact_fits, store, found, asker)
            return {**found, "fits": fits}
        return found

    gate = [Depends(token_gate(service.settings.token))]

    @api.post("/studies", status_code=201, response_model=Submitted, responses=WRITE_ERRORS,
              dependencies=gate, openapi_extra=SPEC_BODY)  # fmt: skip
    async def submit(request: Request) -> dict[str, Any]:
        """Submit a study from a spec (what ``autotune submit`` does), for workers serving the
        queue (``autotune queue-worker``) to measure. Needs the token."""
        try:
            data = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError):
            raise Refused(400, "the body is not JSON: send a spec as a JSON object") from None
        try:
            SpecBody.model_validate(data)
        except ValidationError as exc:
            raise Refused(422, validation_line(exc)) from None
        name = await run_in_threadpool(_submit, service, data)
        cache.changed()
        return {"study": name, "page": f"/studies/{name}", "api": f"/api/studies/{name}"}

    return api


def _submit(service: Service, data: Any) -> str:
    from autotune.search import submit
    from autotune.service.intake import spec_from_request

    spec = spec_from_request(data, service.settings.model_root)
    name = spec.study or f"{spec.model.slug()}-{spec.workload.slug()}"
    if service.store.study(name) is not None:
        raise Refused(409, f"a study named {name!r} exists already")
    return submit(spec, service.store)
