"""The shapes of the JSON API's answers and of a submitted spec, for its OpenAPI schema."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from autotune.search.spec import TABLES


class Error(BaseModel):
    """Every refusal and failure: one line."""

    error: str


class Health(BaseModel):
    status: str
    storage: str
    studies: int


class Pick(BaseModel):
    """A study's current pick under its policy."""

    key: str
    speedup: float | None
    compile_s: float | None
    latency_ms: float | None
    confirmed: bool
    verdict: str


class Summary(BaseModel):
    """One study as the index shows it."""

    study: str
    model: str | None
    layers: int | None
    workload: str
    device: str
    device_name: str | None
    torch: str | None
    measured: int
    deduced: int
    ok: int
    failed: int
    budget: int | None
    runs: int
    live_workers: int
    pick: Pick | None
    exported: bool
    done: bool
    last: str | None


class Studies(BaseModel):
    storage: str
    studies: list[Summary]


class TrialRow(BaseModel):
    """A stored strategy: measured by a trial, or deduced from one (``deduced_from``)."""

    key: str
    trial_number: int | None
    status: str
    deduced_from: str | None
    compile_s: float | None
    latency_ms: float | None
    speedup: float | None
    reason: str


class FrontPoint(BaseModel):
    key: str
    compile_s: float | None
    latency_ms: float | None
    speedup: float | None
    memory_mb: float | None
    trial_number: int | None


class Study(Summary):
    """One study with its spec, environment, trials and Pareto front."""

    policy: str
    spec: dict[str, Any]
    environment: dict[str, Any]
    trials: list[TrialRow]
    front: list[FrontPoint]
    excluded: dict[str, Any] | None


class LookupReply(BaseModel):
    """The best known config: ``config`` is the ``accelerate`` export (TorchDynamoPlugin's
    fields and the ``autotune`` block); ``exported`` false when it is the pick so far of a
    study not finished yet."""

    study: str
    policy: str
    key: str
    exported: bool
    verdict: str | None
    environment: dict[str, Any]
    config: dict[str, Any]
    fits: dict[str, Any] | None = None  # given the asker's fingerprint: would each artefact hit


class Submitted(BaseModel):
    study: str
    page: str
    api: str


def _table(name: str) -> type[BaseModel]:
    fields: dict[str, Any] = {key: (Any, None) for key in TABLES[name]}
    return create_model(f"{name.title()}Table", __config__=ConfigDict(extra="forbid"), **fields)


SpecBody = create_model(
    "Spec",
    __config__=ConfigDict(extra="forbid"),
    __doc__="A study spec: the tables of a spec file (studies/*.toml) as JSON.",
    **{name: (_table(name) | None, None) for name in TABLES},
)
