"""What a child process is asked to do: a typed request, built once in the parent and sent as a
plain dict (JSON) to the child, which reads it back into this class and dispatches on its kind.

- ``trial``: measure one strategy at one start (cold, warm, portable, precompiled or aot: the
  start is what the request loads and saves);
- ``reference``: compute the study's higher-precision reference into ``reference_out``;
- ``confirm``: time ``confirm``'s strategies and eager in interleaved rounds, in one process;
- ``serve``: play the traffic in a plain server loop through the ``exported`` file
  (:mod:`autotune.trial.server_loop`), a confirmation's self-check.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.workload import Settings, Workload

KINDS = ("trial", "pilot", "reference", "confirm", "serve")  # pilot: an auto strategy's


@dataclass(frozen=True)
class Request:
    """One child's task. Validated at construction; ``to_dict``/``from_dict`` on the wire."""

    kind: str
    strategy: Strategy
    model: ModelRef
    workload: Workload
    iters: int = 10
    warmup: int = 2
    seed: int = 0
    tolerance: float = 1.0
    reference: str | None = None  # the study's reference file, to judge outputs against
    reference_dtype: str = ""
    reference_reason: str = ""  # why there is none
    save_artifact: str | None = None  # the cold start saves its cache artefact here
    build_ahead: dict[str, str] = field(default_factory=dict)  # kind -> where to build it
    load_artifact: str | None = None  # a portable start loads this artefact first
    load_ahead: tuple[str, str] | None = None  # (kind, path): a start that skips the compiler
    confirm: tuple[Strategy, ...] = ()  # the strategies a confirmation times
    reference_out: str | None = None  # where a reference request writes the reference
    launched: float = 0.0  # when the parent started the process (time.time())
    deadline: float = 0.0  # the timed rounds end by then (time.time(); 0: none), see timing
    least: int = 0  # ...but not before this many rounds
    steady: int = 0  # a traffic's steady shapes a round times, at most (0: traffic's default)
    first_by: float = 0.0  # a baseline's first pass: past this, a sample of its shapes (0: all)
    rung: int = 0  # a cheap rung's rounds, then a check against ``front`` (0: none; trial.rungs)
    front: tuple[tuple[float, float, float | None], ...] = ()  # the study's, as rungs.handed
    exported: str | None = None  # a serve request's file, loaded through autotune.apply

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"request kind must be one of {KINDS}, got {self.kind!r}")
        if (self.kind == "reference") != bool(self.reference_out):
            raise ValueError("a reference request, and only one, names reference_out")
        if (self.kind == "confirm") != bool(self.confirm):
            raise ValueError("a confirm request, and only one, names the strategies to time")
        if (self.kind == "serve") != bool(self.exported):
            raise ValueError("a serve request, and only one, names the exported file")

    @classmethod
    def trial(
        cls, model: ModelRef, workload: Workload, strategy: Strategy, settings: Settings,
        reference: Any = None,
    ) -> Request:  # fmt: skip
        """A cold trial of ``strategy``, judged against ``reference`` (a
        :class:`~autotune.trial.reference.Reference` or None)."""
        return cls("trial", strategy, model, workload, settings.iters, settings.warmup,
                   settings.seed, settings.tolerance, **judged_by(reference),
                   deadline=settings.deadline, least=settings.least,
                   steady=settings.steady, first_by=settings.first_by)  # fmt: skip

    def but(self, **changes: Any) -> Request:
        """This request with ``changes`` (another start of the same trial, say)."""
        return dataclasses.replace(self, **changes)

    def base(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The strategy, model and workload as a measurement records them."""
        return self.strategy.to_dict(), self.model.to_dict(), self.workload.to_dict()

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        strategy, model, workload = self.base()
        data.update(strategy=strategy, model=model, workload=workload,
                    confirm=[s.to_dict() for s in self.confirm],
                    load_ahead=list(self.load_ahead) if self.load_ahead else None)  # fmt: skip
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Request:
        data = dict(data)
        data["strategy"] = Strategy.from_dict(data["strategy"])
        data["model"] = ModelRef.from_dict(data["model"])
        data["workload"] = Workload.from_dict(data["workload"])
        data["confirm"] = tuple(Strategy.from_dict(s) for s in data.get("confirm") or ())
        data["load_ahead"] = tuple(data["load_ahead"]) if data.get("load_ahead") else None
        data["front"] = tuple(tuple(p) for p in data.get("front") or ())
        return cls(**data)


def judged_by(reference: Any) -> dict[str, Any]:
    """A request's fields that name ``reference`` (a
    :class:`~autotune.trial.reference.Reference`, or None: judged against eager)."""
    if reference is None:
        return {}
    return {"reference": reference.path, "reference_dtype": reference.dtype,
            "reference_reason": reference.reason}  # fmt: skip
