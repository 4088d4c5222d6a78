"""What is measured (batch, sequence length, dtype, device, and inference, train, generate or
continuous: requests arriving at a server that batches them) and how each trial times it
(``Settings``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import autotune.arrivals
import autotune.device
import autotune.traffic
from autotune import fields
from autotune.errors import ConfigError
from autotune.fields import option, positive, text, whole
from autotune.start_kinds import DEFAULT, parse
from autotune.traffic.files import ANSWER_RULE, LEAST_ANSWER

DTYPES = ("float32", "bfloat16", "float16")
KINDS = ("inference", "train", "generate", "continuous")
ANSWERED = ("generate", "continuous")  # the kinds whose requests are answered, token by token
STOPS = ("length", "eos")  # where a generate answer ends
SAMPLINGS = ("greedy", "sample", "model")  # how a generate answer's tokens are chosen
DEVICE_HELP = "auto (default: cuda where there is one, else cpu), cpu, cuda or cuda:N"


@dataclass(frozen=True)
class Workload:
    """The input shape, precision, device and step that every trial of a study measures."""

    batch_size: int = option(1, "inputs per call, or a spread of them (1..8, 1,4,8): a traffic",
                             read=autotune.traffic.whole_or_spread(1))  # fmt: skip
    seq_len: int = option(
        32,
        "tokens per input, or a spread of them: 16..512 (log-uniform, "
        "seeded) or 32,128,512 (a traffic)",
        read=autotune.traffic.whole_or_spread(1),
    )
    dtype: str = option(
        "float32",
        "float32, bfloat16, float16, or auto: the dtype a model is "
        "served in here (bfloat16 where this CPU or GPU computes in it "
        "natively, else float32 on a CPU, float16 on a GPU)",
        read=text(),
    )
    device: str = option("cpu", DEVICE_HELP, read=text())  # the command line's: auto
    kind: str = option("inference", "inference, train, generate or continuous (causal LMs; "
                       "continuous: requests arriving at a server that batches them)",
                       flag="--workload", read=text())  # fmt: skip
    new_tokens: int = option(32, "generate, continuous: new tokens per generation (the "
                             "prefill's, then one per decode step), or a spread of them over a "
                             "traffic: 8..128",
                             read=autotune.traffic.whole_or_spread(1))  # fmt: skip
    traffic: tuple[tuple[int, int], ...] = option(
        (),
        "FILE: the requests a deployment serves, in order (JSON lines or CSV with batch_size "
        "and seq_len; continuous: each one's arrival_s or timestamp too); each strategy is "
        "measured over them",
        read=autotune.arrivals.read,
    )
    stop: str = option("length", "generate: where an answer ends: length (every one of its new "
                       "tokens decoded, as the traffic's rows say) or eos (where the model "
                       "stops, as generate does, its new tokens the most)",
                       read=text(STOPS))  # fmt: skip
    sampling: str = option("greedy", "generate: how its tokens are chosen, and timed: greedy, "
                           "sample (do_sample on, the model's generation config's "
                           "temperature, top-k and top-p, seeded alike on every side) or "
                           "model (the model's generation config as it stands)",
                           read=text(SAMPLINGS))  # fmt: skip
    requests: int | None = option(None, "the traffic's requests played in a trial (default "
                                  f"{autotune.traffic.DEFAULT_REQUESTS} for a spread, a file's "
                                  "all)", read=whole(1), cli_type=int)  # fmt: skip
    rate: float | None = option(None, "continuous: R requests a second, arriving as a Poisson "
                                "process (seeded)", read=positive, cli_type=float)  # fmt: skip
    concurrency: int | None = option(None, "continuous: a closed loop of C requests in flight, "
                                     "each answered one replaced by the next", read=whole(1),
                                     cli_type=int)  # fmt: skip
    slo: str = option("", "continuous: the targets goodput counts, e.g. ttft=500ms,tpot=50ms, "
                      "in ms or s (default none)", read=autotune.arrivals.slo_text)  # fmt: skip
    # a generate traffic's new tokens, request by request (from the file, or --new-tokens's
    # spread); empty for one shape and for the other workloads
    answers: tuple[int, ...] = ()
    # a continuous traffic's arrivals, request by request, in seconds from the start (its
    # file's, or drawn at --rate); empty for a closed loop (--concurrency) and other workloads
    arrivals: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        first = self.requests  # a file's first N, read alone: a week's trace is never read whole
        if isinstance(self.traffic, str) and type(first) is int and first >= 1:
            object.__setattr__(self, "traffic", autotune.arrivals.read_file(self.traffic, first))
        fields.validate(self)
        object.__setattr__(self, "answers", tuple(self.answers))  # a stored list reads back
        known = autotune.arrivals.check(self.kind, self.traffic, tuple(self.arrivals),
                                        self.rate, self.concurrency, self.slo)  # fmt: skip
        path = getattr(self.traffic, "path", "")  # a file's, whose arrivals are checked
        self._draw_traffic()
        if self.kind == "continuous":
            known = autotune.arrivals.settle(self.traffic, known, self.rate, path)
        object.__setattr__(self, "arrivals", known)
        if self.dtype not in DTYPES:
            raise ConfigError(f"bad dtype {self.dtype!r}: use one of {', '.join(DTYPES)} "
                              "or auto")  # fmt: skip
        if self.kind not in KINDS:
            raise ConfigError(f"bad workload {self.kind!r}: use one of {', '.join(KINDS)}")
        if self.batch_size < 1 or self.seq_len < 1:
            raise ConfigError("--batch-size and --seq-len must be at least 1")
        if self.kind in ANSWERED and min(self.answers or (self.new_tokens,)) < LEAST_ANSWER:
            raise ConfigError(f"--new-tokens must be {ANSWER_RULE}")
        if self.kind != "generate" and (self.stop, self.sampling) != ("length", "greedy"):
            raise ConfigError("--stop and --sampling are the generate workload's (continuous: "
                              "greedy, each answer to its length)")  # fmt: skip
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ConfigError(f"bad device {self.device!r}: use auto, cpu, cuda or cuda:N")

    def _draw_traffic(self) -> None:
        """Spreads become requests; a traffic's most frequent shape becomes the workload's
        shape (what one-shape readers of it see)."""
        requests, spread = self.traffic, autotune.traffic.is_spread
        answers = self.new_tokens if self.kind in ANSWERED else None
        if spread(self.new_tokens) and self.kind not in ANSWERED:
            raise ConfigError("--new-tokens is the generate and continuous workloads'")
        drawn = self.kind == "continuous" and not requests  # it always plays a traffic
        if drawn or spread(self.batch_size) or spread(self.seq_len) or spread(self.new_tokens):
            if requests:
                raise ConfigError("give a traffic file or spreads of --seq-len/--batch-size/"
                                  "--new-tokens, not both")  # fmt: skip
            requests = autotune.traffic.draw(self.batch_size, self.seq_len, self.requests,
                                             answers=answers)  # fmt: skip
        elif requests and self.requests:
            requests = requests[: self.requests]
        if not requests:
            return
        if self.kind == "train":
            raise ConfigError("a traffic is measured for the inference and generate workloads; "
                              "the train workload measures one shape")  # fmt: skip
        got = tuple(self.answers) or self._answers(requests)
        requests = tuple((r[0], r[1]) for r in requests)
        shape = autotune.traffic.distinct(requests)[0][0]
        one = max(got) if got else self.new_tokens
        for name, value in zip(("batch_size", "seq_len", "traffic", "requests", "answers",
                                "new_tokens"), (*shape, requests, None, got, one),
                               strict=True):  # fmt: skip
            object.__setattr__(self, name, value)

    def _answers(self, requests: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
        """A generate traffic's new tokens per request: each request's own, else
        ``--new-tokens`` for every one; none for inference (a file's answers are left out)."""
        if self.kind not in ANSWERED:
            return ()
        given = [r[2] if len(r) > 2 else None for r in requests]
        if all(n is None for n in given):
            if not isinstance(self.new_tokens, int):
                raise ConfigError("--new-tokens: a spread needs spreads, not a traffic file")
            return (self.new_tokens,) * len(requests)
        if None in given:
            raise ConfigError(f"traffic request {given.index(None) + 1}: no new_tokens, where "
                              "other requests give theirs")  # fmt: skip
        if min(given) < LEAST_ANSWER:  # type: ignore[type-var]
            n = next(i for i, g in enumerate(given, 1) if g is not None and g < LEAST_ANSWER)
            raise ConfigError(f"traffic request {n}: new_tokens must be {ANSWER_RULE}")
        return tuple(given)  # type: ignore[arg-type]

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The distinct ``(batch_size, seq_len)`` shapes served: the traffic's, or the one."""
        if not self.traffic:
            return [(self.batch_size, self.seq_len)]
        return [shape for shape, _ in autotune.traffic.distinct(self.traffic)]

    def at(self, shape: tuple[int, int]) -> Workload:
        """This workload at one shape, without its traffic (to build inputs of that shape; a
        continuous request's are a generate request's: the generate workload at that shape)."""
        if self.kind == "continuous":
            return dataclasses.replace(self, kind="generate", batch_size=shape[0],
                                       seq_len=shape[1], traffic=(), arrivals=(), rate=None,
                                       concurrency=None, slo="")  # fmt: skip
        return dataclasses.replace(self, batch_size=shape[0], seq_len=shape[1], traffic=())

    @classmethod
    def create(cls, device: str = "auto", dtype: str = "float32", **fields: Any) -> Workload:
        """Build a workload, resolving an ``auto`` device and dtype on this machine
        (:func:`autotune.environment.resolve_dtype`: as before where this machine decided it) and
        checking the device against it."""
        device = autotune.device.resolve(device)
        if dtype == "auto":
            from autotune.environment import resolve_dtype

            dtype = resolve_dtype(device).dtype
        return cls(device=device, dtype=dtype, **fields)

    @property
    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if self.kind not in ANSWERED:  # other workloads' stored dicts stay as they were
            del data["new_tokens"]
        for name, default in (("stop", "length"), ("sampling", "greedy"), ("rate", None),
                              ("concurrency", None), ("slo", ""), ("arrivals", ())):  # fmt: skip
            if data[name] == default:  # as stored before these existed
                del data[name]
        if self.arrivals:
            data["arrivals"] = list(self.arrivals)
        del data["requests"]  # spent: the traffic holds the requests played
        if not self.answers:
            del data["answers"]
        else:
            data["answers"] = list(self.answers)
        if self.traffic:
            data["traffic"] = [list(shape) for shape in self.traffic]
        else:
            del data["traffic"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        return cls(**data)

    @property
    def cache_len(self) -> int:
        """The static KV cache's length for ``generate``: the prompt plus the new tokens (over
        a traffic, the longest prompt plus answer of any request, as a deployment that
        allocates one cache for every request sizes it)."""
        if self.answers:
            return max(s + n for (_, s), n in zip(self.traffic, self.answers, strict=True))
        return self.seq_len + self.new_tokens

    def slug(self) -> str:
        """A short readable name, e.g. ``inference-b1-s32-bfloat16-cpu``"""
        device = self.device.replace(":", "")
        tokens = f"-n{self.new_tokens}" if self.kind == "generate" else ""
        served = "".join(f"-{v}" for v in (self.stop, self.sampling)
                         if v not in ("length", "greedy"))  # fmt: skip
        if self.traffic:
            import hashlib

            played = [self.traffic, self.answers, self.arrivals] if self.arrivals else self.traffic
            digest = hashlib.sha256(json.dumps(played).encode()).hexdigest()[:6]
            kind = self.kind + autotune.arrivals.label(self.rate, self.concurrency)
            return f"{kind}-traffic{len(self.traffic)}-{digest}{served}-{self.dtype}-{device}"
        return (f"{self.kind}-b{self.batch_size}-s{self.seq_len}{tokens}{served}-{self.dtype}-"
                f"{device}")  # fmt: skip


@dataclass(frozen=True)
class Settings:
    """How a trial is timed and judged: timed calls, warm-up calls, the child's timeout (per
    start), the RNG seed, the accuracy gate's tolerance, and which starts to measure."""

    iters: int = option(20, "timed calls per trial", read=whole(1), cli_type=int)
    warmup: int = option(3, "warm-up calls before timing", read=whole(0), cli_type=int)
    timeout_s: float = option(1200.0, "seconds one start's process may take", toml="timeout",
                              read=positive, cli_type=float)  # fmt: skip
    seed: int = option(0, "seed of the random weights, inputs and sampler", read=whole(),
                       cli_type=int)  # fmt: skip
    starts: tuple[str, ...] = option(
        DEFAULT,
        "the starts each trial measures: cold, then any of warm, portable, precompiled, aot",
        read=parse,
    )
    tolerance: float = option(1.0, "scales the accuracy gate: 2 is twice as lenient, 0.5 twice "
                              "as strict (see autotune/trial/accuracy.py)", read=positive,
                              cli_type=float)  # fmt: skip
    # Set by a search's plan (autotune.search.plan), not by the user: the timed rounds end by
    # ``deadline`` (time.time(); 0: none), but not before ``least`` rounds, each over at most
    # ``steady`` of a traffic's shapes (0: autotune.traffic.STEADY_SHAPES); a start's process is
    # stopped at ``stop_at`` (time.time(); 0: only its timeout), where going on would break
    # the search's time budget; an eager baseline's first pass over a traffic plays a sample of
    # its shapes where playing them all would run past ``first_by`` (0: every shape).
    stop_at: float = 0.0
    deadline: float = 0.0
    least: int = 0
    steady: int = 0
    first_by: float = 0.0

    def __post_init__(self) -> None:
        fields.validate(self)


def default_objectives(kind: str = "inference") -> tuple[str, ...]:
    """The objectives a study of a workload kind has unless told: a cold start (``compile``),
    and the kind's speed (``decode`` for generate, ``ttft`` for continuous, else ``latency``);
    every objective is :mod:`autotune.choice.objectives`'."""
    speed = {"generate": "decode", "continuous": "ttft"}.get(kind, "latency")
    return ("compile", speed)


def describe(workload: Workload) -> str:
    """A workload in one line, as the dashboard and the service show a stored one."""
    w = workload
    served = "".join((" · answers end at eos" if w.stop == "eos" else "",
                      f" · {w.sampling} sampling" if w.sampling != "greedy" else ""))  # fmt: skip
    if w.kind == "continuous":
        served = " · " + autotune.arrivals.describe(w.arrivals, w.rate, w.concurrency, w.slo)
    if w.traffic:
        return f"{w.kind} · traffic of {autotune.traffic.describe(w.traffic)} · {w.dtype}{served}"
    line = f"{w.kind} · batch {w.batch_size} · seq {w.seq_len} · {w.dtype}"
    return line + (f" · {w.new_tokens} new tokens{served}" if w.kind == "generate" else "")
