"""Measurement: what one trial measured, as small dataclasses that travel as plain dicts."""

from __future__ import annotations

import copy
import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.workload import Workload

# "stopped": its process was stopped where going on would break the search's time budget; it
# is not stored, so that a later run with more time measures it (autotune.search.step)
STATUSES = ("ok", "failed", "timeout", "crashed", "not-applicable", "stopped")
PHASE = "autotune phase: "  # a child's log line as it enters a phase, read where it is stopped


def reached(log: str) -> str:
    """The last phase a child's ``log`` says it entered ("starting" before any)."""
    found = [line[len(PHASE) :].strip() for line in log.splitlines() if line.startswith(PHASE)]
    return found[-1] if found else "starting its process"


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass
class Latency:
    """Per-call latency statistics in milliseconds, with the raw samples kept."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    iqr_ms: float
    samples_ms: list[float] = field(default_factory=list)

    @classmethod
    def from_samples(cls, samples_s: list[float]) -> Latency:
        ms = sorted(s * 1e3 for s in samples_s)
        return cls(
            median_ms=statistics.median(ms),
            p10_ms=quantile(ms, 0.10),
            p90_ms=quantile(ms, 0.90),
            iqr_ms=quantile(ms, 0.75) - quantile(ms, 0.25),
            samples_ms=[s * 1e3 for s in samples_s],
        )


@dataclass
class Accuracy:
    """The verdict on the compiled outputs (:mod:`autotune.trial.accuracy`). Against eager, element
    by element: ``max_abs`` and ``max_rel`` (over the output's scale), ``mismatched`` (the
    fraction of elements outside ``atol + rtol * |eager|``). Against the higher-precision
    ``reference`` (its dtype; "" when there was none): eager's and the compiled output's RMSE
    and largest error. ``rule`` says what decided, ``tolerance`` the user's factor on it."""

    max_abs: float
    max_rel: float
    passed: bool
    atol: float
    rtol: float
    detail: str = ""
    mismatched: float = 0.0
    reference: str = ""
    eager_rmse: float | None = None
    compiled_rmse: float | None = None
    eager_max: float | None = None
    compiled_max: float | None = None
    tolerance: float = 1.0
    rule: str = ""


@dataclass
class Graphs:
    """What dynamo did: graphs made, graph breaks and recompiles, each with its reason."""

    count: int = 0
    breaks: int = 0
    break_reasons: list[str] = field(default_factory=list)
    recompiles: int = 0
    recompile_reasons: list[str] = field(default_factory=list)
    limit_hit: str = ""  # in words, when dynamo hit its recompile limit and ran code eager
    limit_hint: str = ""  # the fix torch's guard hint suggests, e.g. allow_unspec_int_on_nn_module
    eager_blocks: int | None = None  # repeated blocks whose forward ran uncompiled in a probe call
    blocks: int | None = None  # repeated blocks in the model
    cudagraph_skips: int = 0  # graphs (regions) Inductor ran without CUDA graphs (fell back)
    cudagraph_skip_reason: str = ""  # the first fallback's reason, as Inductor logged it
    cudagraph_skipped: list[str] = field(default_factory=list)  # each such graph: where, why


@dataclass
class TokenCheck:
    """Generate: the compiled generation's greedy tokens against eager's, all of them."""

    passed: bool
    tokens: int  # per sequence: the prefill's token and one per decode step
    matched: int  # leading tokens (per sequence, all sequences alike) equal to eager's
    detail: str = ""
    near_tie: bool = (
        False  # they parted at a near tie of eager's top two logits: not compared after
    )


@dataclass
class Memory:
    """Peak memory in MiB, of ``kind``: on a GPU the CUDA caching allocator's reserved peak after
    emptying its cache (``cuda-max-reserved``, for every strategy; older measurements may say
    ``cuda-max-allocated``), on a CPU the resident set's high-water mark."""

    kind: str
    eager_peak_mb: float
    compiled_peak_mb: float
    compile_peak_mb: float | None = None


@dataclass
class Start:
    """One start of a strategy in a fresh process: ``cold`` (empty compile caches), ``warm``
    (the cold start's cache directories), ``portable`` (empty caches, then the cold start's
    saved artefact loaded), ``precompiled`` or ``aot`` (empty caches, then a precompiled
    function or an AOTInductor package loaded: :mod:`autotune.starts.precompiled`).
    ``compile_s`` is the start's first compiled call, plus ``load_s`` for a start that loads a
    file.
    ``cache`` holds the process's cache hit/miss counters; ``phases``
    its dynamo/backend split; ``latency`` a brief interleaved timing (not for cold, whose
    timing is the measurement's own). ``measured`` is False where the backend keeps no cache
    and the start is the cold compile again, ``note`` says why (or what went wrong)."""

    kind: str
    status: str = "ok"
    compile_s: float | None = None
    load_s: float = 0.0
    cache: dict[str, int] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    latency: Latency | None = None
    eager_latency: Latency | None = None
    speedup: float | None = None
    measured: bool = True
    note: str = ""
    wall_s: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Start:
        data = dict(data)
        for name in ("latency", "eager_latency"):
            if data.get(name) is not None:
                data[name] = Latency(**data[name])
        return cls(**data)


@dataclass
class Measurement:
    """One strategy measured once, cold, in a fresh process. In memory it holds the strategy,
    the model and the workload as objects; :meth:`to_dict` and :meth:`from_dict` are the wire
    and the stored form (a dict given to the constructor is read as the object; an empty
    model or workload is None)."""

    strategy: Strategy
    model: ModelRef | None
    workload: Workload | None
    status: str
    reason: str = ""
    stage: str = ""  # where a failure arose: "dynamo" (tracing, before any backend) or ""
    deduced: str = ""  # not measured: how it follows from a measured trial (autotune.deduction)
    compile_s: float | None = None
    eager_first_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    latency: Latency | None = None
    eager_latency: Latency | None = None
    speedup: float | None = None
    memory: Memory | None = None
    graphs: Graphs | None = None
    accuracy: Accuracy | None = None
    regions: int | None = None
    # generate: latency/eager_latency hold the per-token decode latency (every decode step of the
    # timed rounds); ttft is the prefill (time to first token); tokens/s the whole generation's
    ttft: Latency | None = None
    eager_ttft: Latency | None = None
    tokens_per_s: float | None = None
    eager_tokens_per_s: float | None = None
    tokens: TokenCheck | None = None
    # generate: eager on a static cache, the compiled side's (tpot_ms, ttft_ms, tokens_per_s;
    # a traffic's weighted as its figures are): what a static cache alone buys, shown beside
    eager_static: dict[str, float] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    wall_s: float | None = None
    log_tail: str = ""
    traceback: str = ""  # a failure's whole traceback in the child (autotune show --trial)
    cache: dict[str, int] = field(default_factory=dict)  # this process's cache counters
    load_s: float | None = None  # a portable start's load of the saved artefact
    artifact: dict[str, Any] | None = None  # the saved cache artefact: sha256, bytes, where
    starts: dict[str, Start] = field(default_factory=dict)  # cold, warm, portable
    rounds: dict[str, list[float]] = field(default_factory=dict)  # a confirmation's ms per round
    # the built artefacts that skip the compiler, by kind (stored as "ahead" before this name)
    precompiled: dict[str, dict[str, Any]] = field(default_factory=dict)
    traffic: dict[str, Any] | None = None  # a traffic's first pass and steady state (its trial)
    # "cheap": the trial stopped after a cheap rung, as it could not reach the front (its
    # latency is the cheap rounds'; never a pick); "full": it passed one; "": none ran
    rung: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.strategy, dict):
            self.strategy = Strategy.from_dict(self.strategy)
        if isinstance(self.model, dict):
            self.model = ModelRef.from_dict(self.model) if self.model else None
        if isinstance(self.workload, dict):
            self.workload = Workload.from_dict(self.workload) if self.workload else None
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def start_s(self, kind: str) -> float | None:
        """Seconds one ``cold``, ``warm`` or ``portable`` start costs (cold: ``compile_s``);
        None where that start was not measured or failed."""
        if kind == "cold":
            return self.compile_s
        start = self.starts.get(kind)
        return start.compile_s if start is not None and start.status == "ok" else None

    @property
    def without_cuda_graphs(self) -> str:
        """Where a CUDA-graph strategy ran without them (Inductor fell back): ``all`` its graphs
        (it is plain Inductor in effect, whatever its key says), ``K of N graphs`` (those
        regions only), or ``""``."""
        g = self.graphs
        if not g or not g.cudagraph_skips:
            return ""
        skipped = g.cudagraph_skips
        return "all" if skipped >= g.count else f"{skipped} of {g.count} graphs"

    @property
    def limit_hit(self) -> bool:
        """Dynamo hit its recompile limit: part of the model ran eager, not as compiled."""
        return bool(self.graphs and self.graphs.limit_hit)

    @property
    def cheap(self) -> bool:
        """Measured at a cheap rung's fidelity only (:mod:`autotune.trial.rungs`)."""
        return self.rung == "cheap"

    @property
    def feasible(self) -> bool:
        """Ran, and gave the right answers."""
        return self.ok and self.accuracy is not None and self.accuracy.passed

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in data.keys() - {"strategy", "model", "workload"}:
            value = data[name]
            if dataclasses.is_dataclass(value):
                data[name] = dataclasses.asdict(value)
            elif name == "starts":
                data[name] = {k: dataclasses.asdict(v) for k, v in value.items()}
            else:
                data[name] = copy.deepcopy(value)
        data["strategy"] = self.strategy.to_dict()
        data["model"] = self.model.to_dict() if self.model else {}
        data["workload"] = self.workload.to_dict() if self.workload else {}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        data = dict(data)
        if "ahead" in data:  # the name before "precompiled", in what older versions stored
            data.setdefault("precompiled", data.pop("ahead"))
        for name, kind in (
            ("latency", Latency),
            ("eager_latency", Latency),
            ("memory", Memory),
            ("graphs", Graphs),
            ("accuracy", Accuracy),
            ("ttft", Latency),
            ("eager_ttft", Latency),
            ("tokens", TokenCheck),
        ):
            if data.get(name) is not None:
                data[name] = kind(**data[name])
        data["starts"] = {k: Start.from_dict(v) for k, v in (data.get("starts") or {}).items()}
        return cls(**data)
