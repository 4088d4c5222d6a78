"""Strategy: how one model is compiled (granularity, backend, mode, dynamic, fullgraph, and
Inductor options).

A strategy is validated against the running torch, has one canonical form (fields that cannot
matter are normalised away, so equivalent strategies share one key), and gives the
``torch.compile`` keyword arguments it compiles with (what the trial runs). It is a plain value:
what Accelerate, transformers and an export file call its fields is
:mod:`autotune.ship.formats`' business.

Inductor's options are named switches (:mod:`autotune.strategy.inductor`); an Inductor strategy
compiles with ``options=`` only: its mode's bundle merged with its switches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotune import usercode
from autotune.errors import ConfigError, NotApplicable
from autotune.strategy import batching as knobs
from autotune.strategy.inductor import (
    ONLY_UNDER_MODE,
    SWITCHES,
    check_switches,
    inductor_modes,
    is_mode,
    merged,
    spell,
    torch_version,
)
from autotune.strategy.kv_cache import KV_CACHES
from autotune.strategy.shapes import BUCKETS, MARKS, STANCES, is_buckets

GRANULARITIES = ("none", "full", "regional", "nested")
# generating: the prefill compiled with the decode steps, or left eager (transformers' own
# default compiles only the decode: a new prompt length then compiles nothing)
PREFILLS = ("compiled", "eager")
EAGER_BACKEND = "none"


# torch's own backends, registered in every torch this runs on (a test checks each): a name
# among them is known without importing Dynamo (1.6 s of CPU a process on a CPU like ours).
BUILTIN_BACKENDS = ("eager", "aot_eager", "inductor")


def is_registered(backend: str) -> bool:
    """Whether ``backend`` is registered in the running torch (torch's own known at once)."""
    return backend in BUILTIN_BACKENDS or backend in registered_backends()


def registered_backends() -> list[str]:
    """Every backend registered in the running torch, test-only ones included (read each time:
    a user may register one at any moment)."""
    import torch._dynamo

    return list(torch._dynamo.list_backends(exclude_tags=()))


def parse_dynamic(text: str | bool | None) -> bool | None:
    """Parse ``true``/``false``/``none`` (as the CLI and spec files write it)."""
    if text is None or isinstance(text, bool):
        return text
    value = {"true": True, "false": False, "none": None, "auto": None}.get(str(text).lower(), "?")
    if value == "?":
        raise ConfigError(f"bad dynamic value {text!r}: use true, false or none")
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class Strategy:
    """One way to compile a model, in canonical form from the moment it is built.

    Fields that cannot matter are normalised away when it is made (mode and options only for
    inductor, where the mode that absorbs the most of the options wins; nothing at all for
    ``none``), so equal strategies are equal objects and share one :attr:`key`, computed once.
    """

    granularity: str = "full"
    backend: str = "inductor"
    mode: str | None = None
    dynamic: bool | None = None
    fullgraph: bool = False
    options: tuple[str, ...] = ()  # Inductor option switches (see SWITCHES)
    buckets: str = "none"  # under traffic: pad to buckets (autotune.strategy.shapes)
    marks: str = "none"  # under traffic: the dimensions marked dynamic
    stance: str = "default"  # under traffic: torch.compiler.set_stance around every call
    prefill: str = "compiled"  # generating: the prefill compiled, or eager (decode alone)
    kv_cache: str = "single"  # generating over a traffic: one static cache, or one a bucket
    batching: str = "none"  # continuous batching: its own knobs (autotune.strategy.batching)
    # an auto trial's choice, not in the key: buckets' (batch, sequence) edges; pad's ((q,), (kv,))
    edges: tuple[tuple[int, ...], tuple[int, ...]] | None = field(default=None, compare=False)
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise ConfigError(
                f"bad granularity {self.granularity!r}: use one of {', '.join(GRANULARITIES)}"
            )
        if self.dynamic not in (None, True, False):
            raise ConfigError(f"bad dynamic value {self.dynamic!r}: use true, false or none")
        if not is_buckets(self.buckets):
            raise ConfigError(f"bad buckets {self.buckets!r}: use one of {', '.join(BUCKETS)} "
                              "or auto:K (K from 1 to 64)")  # fmt: skip
        if self.marks not in MARKS:
            raise ConfigError(f"bad marks {self.marks!r}: use one of {', '.join(MARKS)}")
        if self.stance not in STANCES:
            raise ConfigError(f"bad stance {self.stance!r}: use one of {', '.join(STANCES)}")
        if self.prefill not in PREFILLS:
            raise ConfigError(f"bad prefill {self.prefill!r}: use one of {', '.join(PREFILLS)}")
        if self.kv_cache not in KV_CACHES:
            raise ConfigError(f"bad kv_cache {self.kv_cache!r}: use one of "
                              f"{', '.join(KV_CACHES)}")  # fmt: skip
        parsed = knobs.Batching.parse(self.batching)
        object.__setattr__(self, "batching", parsed.spell())
        if parsed.level:  # transformers' preset: its fields
            for name, value in knobs.anchor_fields(parsed.level).items():
                object.__setattr__(self, name, value)
        for name, value in zip(_FIELDS, _normalised(self), strict=True):
            object.__setattr__(self, name, value)
        if not (self.buckets.startswith("auto") or parsed.pad):
            object.__setattr__(self, "edges", None)
        object.__setattr__(self, "key", _key(self))

    @classmethod
    def create(
        cls,
        granularity: str = "full",
        backend: str = "inductor",
        mode: str | None = None,
        dynamic: bool | str | None = None,
        fullgraph: bool = False,
        options: tuple[str, ...] | list[str] | None = (),
        buckets: str | None = "none",
        marks: str | None = "none",
        stance: str | None = "default",
        edges: Any = None,
        prefill: str | None = "compiled",
        kv_cache: str | None = "single",
        batching: str | None = "none",
    ) -> Strategy:
        """Build a strategy from loose values (``dynamic`` as text, options as a list, edges
        as lists)."""
        return cls(granularity, backend, mode, parse_dynamic(dynamic), bool(fullgraph),
                   tuple(options or ()), buckets or "none", marks or "none",
                   stance or "default", prefill or "compiled", kv_cache or "single",
                   batching or "none", read_edges(edges))  # fmt: skip

    @property
    def shaped(self) -> bool:
        """Whether it pads to buckets, marks dimensions or sets a stance (for a traffic)."""
        return self.buckets != "none" or self.marks != "none" or self.stance != "default"

    def __str__(self) -> str:
        return self.key

    def check_workload(self, kind: str) -> None:
        """``ConfigError`` where a field does not apply to a ``kind`` workload."""
        if kind != "continuous" and self.batching != "none":
            raise ConfigError("--batching is the continuous workload's")
        if kind == "continuous" and (self.granularity not in knobs.GRANULARITIES
                                     or self.fullgraph):  # fmt: skip
            raise ConfigError("continuous batching compiles the whole step with graph breaks "
                              "(paged attention runs outside the graph): granularity none or "
                              "full, fullgraph false")  # fmt: skip
        if kind == "continuous" and (self.shaped or self.prefill != "compiled"
                                     or self.kv_cache != "single"):  # fmt: skip
            raise ConfigError("a continuous workload pads through --batching q=..+kv=..; "
                              "buckets, marks, stances, --prefill and --kv-cache are not "
                              "its")  # fmt: skip
        if kind != "generate" and (self.prefill, self.kv_cache) != ("compiled", "single"):
            raise ConfigError("--prefill and --kv-cache are the generate workload's")
        if kind == "generate" and (self.marks != "none" or self.stance != "default"
                                   or self.buckets.startswith("auto")):  # fmt: skip
            raise ConfigError("a generate workload pads its prefill to buckets none, pow2 "
                              "or quantiles; marks and stances are not measured for it "
                              "yet")  # fmt: skip
        if kind == "generate" and self.buckets != "none":
            from autotune.environment import check_padded_prefill

            check_padded_prefill()

    def validate(self) -> None:
        """Check the backend and mode exist in the running torch; raise ``ConfigError`` if not."""
        if self.granularity == "none":
            return
        if usercode.is_code(self.backend):
            usercode.resolve(self.backend, "backend")
        elif not is_registered(self.backend):
            raise ConfigError(
                f"backend {self.backend!r} is not registered in torch "
                f"{torch_version()}; known: {', '.join(registered_backends())}"
            )
        if self.mode is not None and not is_mode(self.mode):
            raise ConfigError(
                f"mode {self.mode!r} does not exist in torch {torch_version()}; "
                f"known: {', '.join(inductor_modes())}"
            )

    def inductor_options(self) -> dict[str, Any] | None:
        """The options dict Inductor compiles with (its mode's bundle and its switches), or
        None for other backends."""
        return merged(self.mode or "default", self.options) if self.backend == "inductor" else None

    def needs_cuda(self) -> str | None:
        """Why this strategy needs CUDA, or None when it runs anywhere."""
        if self.backend == "cudagraphs":
            return "the cudagraphs backend records CUDA graphs, which need a CUDA device"
        if (self.inductor_options() or {}).get("triton.cudagraphs"):
            what = (
                f"mode {self.mode!r}" if "cudagraphs" not in self.options else "option cudagraphs"
            )
            return f"{what} uses CUDA graphs, which need a CUDA device"
        return None

    def uses_cuda_graphs(self) -> bool:
        """Whether compiled calls replay CUDA graphs (the cudagraphs backend, or a mode that
        turns on Inductor's ``triton.cudagraphs``)."""
        return self.needs_cuda() is not None

    def check_applicable(self, device: str) -> None:
        """Validate, then raise ``NotApplicable`` (with the reason) if it cannot run on device."""
        self.validate()
        reason = self.needs_cuda()
        if reason and not device.startswith("cuda"):
            raise NotApplicable(f"{self.key} is not applicable on {device}: {reason}")

    def compile_kwargs(
        self, resolve: Callable[[str, str], Any] = usercode.resolve
    ) -> dict[str, Any]:
        """Keyword arguments for ``torch.compile`` (``none`` has none: it is never compiled).
        A ``package.module:function`` backend goes through ``resolve`` (by default it is
        imported: callers holding a name from data pass one that refuses, see
        autotune.usercode)."""
        if self.granularity == "none":
            return {}
        backend: Any = (
            resolve(self.backend, "backend") if usercode.is_code(self.backend) else self.backend
        )
        kwargs: dict[str, Any] = {"backend": backend, "fullgraph": self.fullgraph}
        kwargs["dynamic"] = self.dynamic
        if self.backend == "inductor":
            import torch._inductor  # noqa: F401  the compile needs it: its options are read live

            kwargs["options"] = self.inductor_options()  # never with mode: torch refuses both
        return kwargs

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in _FIELDS}
        data["options"] = list(self.options)
        for name, default in OPTIONAL_DEFAULTS.items():  # older dicts stay as they were
            if data[name] == default:
                del data[name]
        if self.edges is not None:
            data["edges"] = [list(self.edges[0]), list(self.edges[1])]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Strategy:
        return cls.create(**data)


def read_edges(value: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Edges from data (``[[1], [16, 64, 512]]``): two ascending lists of whole numbers of at
    least 1; None for none; ``ConfigError`` for anything else."""
    if value is None:
        return None
    ok = (isinstance(value, (list, tuple)) and len(value) == 2
          and all(isinstance(d, (list, tuple)) and d and list(d) == sorted(set(d))
                  and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in d)
                  for d in value))  # fmt: skip
    if not ok:
        raise ConfigError(f"bad edges {value!r}: expected [batch edges, sequence edges], each "
                          "an ascending list of whole numbers of at least 1")  # fmt: skip
    return tuple(value[0]), tuple(value[1])


_FIELDS = ("granularity", "backend", "mode", "dynamic", "fullgraph", "options", "buckets", "marks",
           "stance", "prefill", "kv_cache", "batching")  # fmt: skip
SHAPED_DEFAULTS = {"buckets": "none", "marks": "none", "stance": "default"}
# the fields a search opens only where they matter (a traffic's shapes, generation), and their
# defaults: a strategy at its default leaves them out of its key and its dict
OPTIONAL_DEFAULTS = {**SHAPED_DEFAULTS, "prefill": "compiled", "kv_cache": "single",
                     "batching": "none"}  # fmt: skip


def _normalised(s: Strategy) -> tuple[Any, ...]:
    """The canonical field values: eager has none; only inductor has a mode and options (the
    mode whose bundle covers the most of them absorbs them)."""
    if s.granularity == "none" or s.backend in (EAGER_BACKEND, "no"):
        return ("none", EAGER_BACKEND, None, None, False, (), "none", "none", "default",
                "compiled", "single", "none")  # fmt: skip
    fullgraph = bool(s.fullgraph)
    dynamic, marks, buckets = s.dynamic, s.marks, s.buckets
    if s.prefill == "eager":  # generating: the buckets pad a compiled prefill only
        buckets = "none"
    if buckets != "none":  # each bucket compiles static
        dynamic, marks = False, "none"
    if s.granularity == "regional" or (dynamic is True and not marks.endswith("-unbacked")):
        marks = "none"  # inputs dynamo never sees; all dynamic (backed) already
    if s.backend != "inductor":
        return (s.granularity, s.backend, None, dynamic, fullgraph, (), buckets, marks, s.stance,
                s.prefill, s.kv_cache, s.batching)  # fmt: skip
    mode = s.mode or "default"
    names = tuple(s.options or ())
    check_switches(names)
    names = tuple(n for n in names if ONLY_UNDER_MODE.get(n, mode) == mode)
    if names and mode in inductor_modes():
        mode, names = spell(merged(mode, names), mode)
    order = list(SWITCHES)
    return (s.granularity, s.backend, mode, dynamic, fullgraph,
            tuple(sorted(set(names), key=order.index)), buckets, marks, s.stance,
            s.prefill, s.kv_cache, s.batching)  # fmt: skip


def _key(s: Strategy) -> str:
    """A stable, readable identity: equal for strategies that cannot differ in effect."""
    if s.granularity == "none":
        return "none"
    dyn = {None: "auto", True: "true", False: "false"}[s.dynamic]
    fg = "fullgraph" if s.fullgraph else "breaks-ok"
    key = f"{s.granularity}/{s.backend}/{s.mode or '-'}/dynamic={dyn}/{fg}"
    key += f"/{'+'.join(s.options)}" if s.options else ""
    key += f"/buckets={s.buckets}" if s.buckets != "none" else ""
    key += f"/marks={s.marks}" if s.marks != "none" else ""
    key += f"/stance={s.stance}" if s.stance != "default" else ""
    key += f"/prefill={s.prefill}" if s.prefill != "compiled" else ""
    key += f"/kv_cache={s.kv_cache}" if s.kv_cache != "single" else ""
    return key + (f"/batching={s.batching}" if s.batching != "none" else "")
