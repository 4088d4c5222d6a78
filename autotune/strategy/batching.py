"""Batching: a continuous-batching strategy's own knobs (``Strategy.batching``), as transformers'
``ContinuousBatchingConfig`` takes them.

transformers serves many requests at once through a manager (``init_continuous_batching``,
``generate_batch``) that packs every request's new tokens into one flat batch a step. A
strategy's compile fields (backend, mode, ``dynamic``, ``fullgraph``, options) are the
``CompileConfig`` of both of its paths (the varlen path, which runs prefills and mixed
batches, and the decode fast path, which only flash attention's paged kernel has); its
``batching`` text holds the rest, as ``key=value`` pairs joined by ``+``, in this order:

- ``level=N`` (1-3): transformers' own presets, ``default_compile_level`` (1: ``dynamic=True``;
  2: ``max-autotune-no-cudagraphs``, dynamic; 3: the same, static), with no compile config of
  ours: the anchors every search measures (level 0 is eager, the ``none`` strategy);
- ``q=N`` and ``kv=N``: ``q_padding_interval_size`` and ``kv_padding_interval_size`` (a compiled
  batch's query tokens padded up to a multiple of ``q``, its cache reads to one of ``kv``;
  transformers' presets 64 and 16,384 where not given): fewer distinct shapes, fewer compiles;
- ``pad=auto``: both intervals chosen before the trial from a pilot's measured batches, by
  lifetime cost (:mod:`autotune.trial.auto_padding`); the strategy's ``edges`` hold the choice
  as ``((q,), (kv,))``;
- ``tokens=N`` and ``requests=N``: ``max_batch_tokens`` and ``max_requests_per_batch``;
- ``graphs=none|varlen|decode|both``: ``use_cuda_graph`` per path (a GPU's; unset: transformers
  decides).

``none`` is transformers' defaults throughout. :func:`config_kwargs` is the one place these
become ``ContinuousBatchingConfig``'s keywords (what the trial runs and the export writes).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from autotune.errors import ConfigError
from autotune.traffic import bucket

NONE = "none"
GRAPHS = ("none", "varlen", "decode", "both")
# transformers' presets of default_compile_level (its initialization.resolve_compile_configs)
LEVELS = {1: ("default", True), 2: ("max-autotune-no-cudagraphs", True),
          3: ("max-autotune-no-cudagraphs", False)}  # fmt: skip
ORDER = ("level", "q", "kv", "pad", "tokens", "requests", "graphs")
AUTO = "auto"  # pad=auto: the intervals chosen from a pilot's batches
# A CompileConfig compiles the whole step, and paged attention is wrapped in
# torch.compiler.disable: a continuous strategy is eager or full, never fullgraph
GRANULARITIES = ("none", "full")
PAGE = 256  # tokens a cache page holds: ContinuousBatchingConfig.page_size's default
DEFAULT_BATCH_TOKENS = 8192  # max_batch_tokens where a strategy leaves it to transformers
PRESET_Q, PRESET_KV = 64, 16384  # transformers' padding intervals where a strategy sets none


@dataclass(frozen=True)
class Batching:
    """A continuous-batching strategy's knobs beside its compile config (see the module)."""

    level: int = 0
    q: int = 0
    kv: int = 0
    pad: str = ""
    tokens: int = 0
    requests: int = 0
    graphs: str = ""

    @classmethod
    def parse(cls, text: str | None) -> Batching:
        """``q=128+kv=256`` (any order; a comma for a plus where no list is split on commas)
        as a value; ``none`` or "" as transformers' defaults."""
        if not text or text == NONE:
            return cls()
        found: dict[str, Any] = {}
        for part in str(text).replace(",", "+").split("+"):
            name, _, value = part.strip().partition("=")
            if name not in ORDER or not value or name in found:
                raise ConfigError(f"bad batching {text!r}: write key=value pairs of "
                                  f"{', '.join(ORDER)}, e.g. q=128+kv=256")  # fmt: skip
            found[name] = value if name in ("graphs", "pad") else _whole(name, value, text)
        made = cls(**found)
        if made.graphs and made.graphs not in GRAPHS:
            raise ConfigError(f"bad batching {text!r}: graphs is one of {', '.join(GRAPHS)}")
        if made.pad and (made.pad != AUTO or made.q or made.kv):
            raise ConfigError(f"bad batching {text!r}: pad=auto chooses both intervals: give it "
                              "without q= and kv=")  # fmt: skip
        if made.level not in (0, *LEVELS):
            raise ConfigError(f"bad batching {text!r}: level is 1, 2 or 3 (0 is eager: the "
                              "none strategy)")  # fmt: skip
        if made.level and made != cls(level=made.level, graphs=made.graphs):
            raise ConfigError(f"bad batching {text!r}: a level is transformers' preset alone "
                              "(with graphs at most)")  # fmt: skip
        return made

    def spell(self) -> str:
        """The canonical text (``none`` for transformers' defaults)."""
        parts = [f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                 if getattr(self, f.name)]  # fmt: skip
        return "+".join(parts) or NONE

    def use_cuda_graph(self) -> tuple[bool, bool] | None:
        """``use_cuda_graph`` as (varlen, decode), or None where transformers decides."""
        if not self.graphs:
            return None
        return self.graphs in ("varlen", "both"), self.graphs in ("decode", "both")


def level_of(text: str) -> int:
    """The transformers preset a batching text names (0: none)."""
    return Batching.parse(text).level


def anchor_fields(level: int) -> dict[str, Any]:
    """A level's compile fields as a strategy holds them (full Inductor, breaks allowed)."""
    mode, dynamic = LEVELS[level]
    return {"granularity": "full", "backend": "inductor", "mode": mode, "dynamic": dynamic,
            "fullgraph": False, "options": (), "batching": f"level={level}"}  # fmt: skip


def compile_config(strategy: Any) -> dict[str, Any]:
    """A compiled strategy as exactly ``CompileConfig``'s fields (an Inductor strategy with
    options passes them with no mode: its mode's bundle is inside them)."""
    s = strategy
    options = s.inductor_options() if s.options else None
    return {"fullgraph": s.fullgraph, "dynamic": s.dynamic, "backend": s.backend,
            "mode": None if options else s.mode, "options": options}  # fmt: skip


def config_kwargs(batching: str, compile_config: dict[str, Any] | None,
                  chosen: Any = None) -> dict[str, Any]:  # fmt: skip
    """``ContinuousBatchingConfig``'s keywords for a strategy's ``batching`` text and its
    ``CompileConfig`` fields (None: eager): both paths compiled alike, or the level's preset;
    ``pad=auto``'s intervals are those ``chosen`` (the strategy's ``edges``, ``((q,), (kv,))``;
    ``ValueError`` where none are). Flash attention is never switched in behind the user's
    back (``auto_switch_to_flash`` off): the attention measured is the model's own."""
    b = resolved(batching, chosen)
    kwargs: dict[str, Any] = {"auto_switch_to_flash": False}
    if b.level:
        kwargs["default_compile_level"] = b.level
    elif compile_config is not None:
        kwargs["varlen_compile_config"] = dict(compile_config)
        kwargs["decode_compile_config"] = dict(compile_config)
    for name, key in (
        ("q", "q_padding_interval_size"),
        ("kv", "kv_padding_interval_size"),
        ("tokens", "max_batch_tokens"),
        ("requests", "max_requests_per_batch"),
    ):
        if getattr(b, name):
            kwargs[key] = getattr(b, name)
    if (graphs := b.use_cuda_graph()) is not None:
        kwargs["use_cuda_graph"] = list(graphs)
    return kwargs


def resolved(text: str, chosen: Any = None) -> Batching:
    """A batching text with ``pad=auto`` replaced by the intervals ``chosen`` for it
    (``((q,), (kv,))``); ``ValueError`` for ``pad=auto`` with none chosen."""
    b = Batching.parse(text)
    if not b.pad:
        return b
    if not chosen:
        raise ValueError(f"batching {text}: pad=auto, and no intervals were chosen for it")
    (q,), (kv,) = chosen
    return replace(b, pad="", q=int(q), kv=int(kv))


def config_object(kwargs: dict[str, Any]) -> Any:
    """transformers' ``ContinuousBatchingConfig`` from its keywords as stored (each path's
    ``CompileConfig`` a dict, ``use_cuda_graph`` a list)."""
    import transformers

    kwargs = dict(kwargs)
    for name in ("varlen_compile_config", "decode_compile_config"):
        if isinstance(kwargs.get(name), dict):
            kwargs[name] = transformers.CompileConfig(**kwargs[name])
    if isinstance(kwargs.get("use_cuda_graph"), list):
        kwargs["use_cuda_graph"] = tuple(kwargs["use_cuda_graph"])
    return transformers.ContinuousBatchingConfig(**kwargs)


def eager_kwargs(batching: str) -> dict[str, Any]:
    """The same serving configuration with nothing compiled (no padding, which only a compiled
    or recorded batch does): eager's side of a trial, whose tokens the compiled side's match."""
    b = Batching.parse(batching)
    return config_kwargs(replace(Batching(), tokens=b.tokens, requests=b.requests).spell(), None)


def _whole(name: str, value: str, text: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"bad batching {text!r}: {name} is a whole number of at least 1")
    return int(value)


def blocks(prompts: list[int], answers: list[int], batching: str) -> int:
    """The KV cache's blocks a traffic of ``prompts`` and ``answers`` (tokens each) needs, every
    request in flight at once, beside a warm-up batch of the strategy's ``max_batch_tokens``:
    transformers sizes it otherwise from free memory (60 % of a CPU's RAM, for every manager)."""
    tokens = Batching.parse(batching).tokens or DEFAULT_BATCH_TOKENS
    held = sum(_up(p + a, PAGE) // PAGE for p, a in zip(prompts, answers, strict=True))
    return held + _up(tokens, PAGE) // PAGE + 1


def fitted_intervals(prompts: list[int], answers: list[int]) -> tuple[int, int]:
    """Intervals fitted to a traffic: the query interval its longest prompt's power of two,
    the KV interval its longest request's (prompt and answer)."""
    longest = max(p + a for p, a in zip(prompts, answers, strict=True))
    return bucket(max(prompts)), bucket(longest)


def candidates(prompts: list[int], answers: list[int], cuda: bool = False) -> tuple[str, ...]:
    """The batching values a search tries over a traffic of ``prompts`` and ``answers``:
    transformers' defaults and its three presets (the anchors), then padding fitted to the
    traffic: one KV interval that holds the longest request whole (``kv``), with it a query
    interval of the longest prompt (``q``), and both with batches of at most two such prompts
    (``tokens``), whose warm-up compiles a far smaller batch than the default 8,192 tokens;
    and intervals chosen by lifetime cost from a pilot's batches (``pad=auto``). On a GPU
    (``cuda``) each of those also with transformers' CUDA graphs on both paths."""
    q, kv = fitted_intervals(prompts, answers)
    fitted = (f"kv={kv}", f"q={q}+kv={kv}", f"q={q}+kv={kv}+tokens={2 * q}", "pad=auto")
    graphed = tuple(f"{f}+graphs=both" for f in fitted) if cuda else ()
    return (NONE, *(f"level={n}" for n in LEVELS), *fitted, *graphed)


def padding(steps: list[tuple[int, ...]], text: str, blocks: int,
            chosen: Any = None) -> dict[str, float]:  # fmt: skip
    """What a strategy's padding costs on the varlen path, over a traffic's batches as eager
    served them (``steps``: each batch's query tokens and the cache tokens it read before them),
    padded as transformers pads a compiled batch (:func:`padded`): padded query tokens over
    real ones, padded attention reads over real ones, and the distinct padded shapes (what a
    static compile makes graphs of)."""
    if not steps:
        return {}
    limits = Limits.of(resolved(text, chosen), blocks)
    shapes, real_q, padded_q, real_kv, padded_kv = set(), 0, 0, 0, 0
    for q, past, *_ in steps:
        pq, pkv = limits.padded(q, past)
        shapes.add((pq, pkv))
        real_q, padded_q = real_q + q, padded_q + pq
        real_kv, padded_kv = real_kv + q + past, padded_kv + pq + pkv
    return {"q_waste": padded_q / real_q - 1, "kv_waste": padded_kv / real_kv - 1,
            "shapes": float(len(shapes)), "batches": float(len(steps))}  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """How transformers pads a compiled batch: its query tokens up to a multiple of ``q``, at
    most ``most_q`` (``max_batch_tokens``); the cache it reads up to a multiple of ``kv``, at
    most ``most_kv`` (the whole cache)."""

    q: int
    kv: int
    most_q: int
    most_kv: int

    @classmethod
    def of(cls, b: Batching, blocks: int) -> Limits:
        """A strategy's limits (transformers' presets where it sets none), its cache of
        ``blocks`` pages."""
        return cls(b.q or PRESET_Q, b.kv or PRESET_KV, b.tokens or DEFAULT_BATCH_TOKENS,
                   blocks * PAGE)  # fmt: skip

    def padded(self, q: int, past: int) -> tuple[int, int]:
        """A batch of ``q`` query tokens that read ``past`` cached ones, as padded (as
        transformers' ``pad_to_interval``: nothing read still pads to one interval)."""
        return (min(_up(q, self.q) if q else self.q, self.most_q),
                min(_up(past, self.kv) if past else self.kv, self.most_kv))  # fmt: skip


def _up(n: int, step: int) -> int:
    return -(-n // step) * step
