"""Strategy: how one model is compiled (granularity, backend, mode, dynamic, fullgraph).

A strategy is validated against the running torch, has one canonical form (fields that cannot
matter are normalised away, so equivalent strategies share one key), and converts to
``torch.compile`` keyword arguments and to and from Accelerate's ``TorchDynamoPlugin`` fields.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any

from autotune.errors import ConfigError, NotApplicable

GRANULARITIES = ("none", "full", "regional", "nested")
EAGER_BACKEND = "none"
# Backends that Accelerate's DynamoBackend enum can name (besides "no").
ACCELERATE_BACKENDS = ("eager", "aot_eager", "inductor", "cudagraphs", "tvm")


def registered_backends() -> list[str]:
    """Every backend registered in the running torch, test-only ones included."""
    import torch._dynamo

    return list(torch._dynamo.list_backends(exclude_tags=()))


def inductor_modes() -> dict[str, dict[str, Any]]:
    """Inductor's modes and the options each one sets."""
    import torch._inductor

    return dict(torch._inductor.list_mode_options())


def parse_dynamic(text: str | bool | None) -> bool | None:
    """Parse ``true``/``false``/``none`` (as the CLI and spec files write it)."""
    if text is None or isinstance(text, bool):
        return text
    value = {"true": True, "false": False, "none": None, "auto": None}.get(str(text).lower(), "?")
    if value == "?":
        raise ConfigError(f"bad dynamic value {text!r}: use true, false or none")
    return value  # type: ignore[return-value]


def _is_import_path(backend: str) -> bool:
    return ":" in backend


def _import_backend(path: str) -> Any:
    """Resolve a ``package.module:function`` backend, as users register their own."""
    module_name, _, attr = path.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"backend {path!r} cannot be imported: {exc}") from None
    if not callable(fn):
        raise ConfigError(f"backend {path!r} is not callable")
    return fn


@dataclass(frozen=True)
class Strategy:
    """One way to compile a model. Build it with :meth:`create` to get the canonical form."""

    granularity: str = "full"
    backend: str = "inductor"
    mode: str | None = None
    dynamic: bool | None = None
    fullgraph: bool = False

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise ConfigError(
                f"bad granularity {self.granularity!r}: use one of {', '.join(GRANULARITIES)}"
            )
        if self.dynamic not in (None, True, False):
            raise ConfigError(f"bad dynamic value {self.dynamic!r}: use true, false or none")

    @classmethod
    def create(
        cls,
        granularity: str = "full",
        backend: str = "inductor",
        mode: str | None = None,
        dynamic: bool | str | None = None,
        fullgraph: bool = False,
    ) -> Strategy:
        """Build the canonical strategy: mode only for inductor, nothing at all for ``none``."""
        dyn = parse_dynamic(dynamic)
        if granularity == "none" or backend in (EAGER_BACKEND, "no"):
            return cls("none", EAGER_BACKEND, None, None, False)
        mode = (mode or "default") if backend == "inductor" else None
        return cls(granularity, backend, mode, dyn, bool(fullgraph))

    def canonical(self) -> Strategy:
        """The equivalent strategy in canonical form."""
        return Strategy.create(**dataclasses.asdict(self))

    @property
    def key(self) -> str:
        """A stable, readable identity: equal for strategies that cannot differ in effect."""
        s = self.canonical()
        if s.granularity == "none":
            return "none"
        dyn = {None: "auto", True: "true", False: "false"}[s.dynamic]
        fg = "fullgraph" if s.fullgraph else "breaks-ok"
        return f"{s.granularity}/{s.backend}/{s.mode or '-'}/dynamic={dyn}/{fg}"

    def __str__(self) -> str:
        return self.key

    def validate(self) -> None:
        """Check the backend and mode exist in the running torch; raise ``ConfigError`` if not."""
        s = self.canonical()
        if s.granularity == "none":
            return
        if _is_import_path(s.backend):
            _import_backend(s.backend)
        elif s.backend not in (known := registered_backends()):
            raise ConfigError(
                f"backend {s.backend!r} is not registered in torch "
                f"{_torch_version()}; known: {', '.join(known)}"
            )
        if s.mode is not None and s.mode not in (modes := inductor_modes()):
            raise ConfigError(
                f"mode {s.mode!r} does not exist in torch {_torch_version()}; "
                f"known: {', '.join(modes)}"
            )

    def needs_cuda(self) -> str | None:
        """Why this strategy needs CUDA, or None when it runs anywhere."""
        s = self.canonical()
        if s.backend == "cudagraphs":
            return "the cudagraphs backend records CUDA graphs, which need a CUDA device"
        if s.mode is not None and inductor_modes().get(s.mode, {}).get("triton.cudagraphs"):
            return f"mode {s.mode!r} uses CUDA graphs, which need a CUDA device"
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

    def compile_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.compile`` (``none`` has none: it is never compiled)."""
        s = self.canonical()
        if s.granularity == "none":
            return {}
        backend: Any = _import_backend(s.backend) if _is_import_path(s.backend) else s.backend
        kwargs: dict[str, Any] = {"backend": backend, "fullgraph": s.fullgraph}
        kwargs["dynamic"] = s.dynamic
        if s.mode is not None:
            kwargs["mode"] = s.mode
        return kwargs

    def accelerate_caveat(self) -> str | None:
        """Why Accelerate's ``TorchDynamoPlugin`` cannot express this strategy exactly, if so."""
        s = self.canonical()
        if s.granularity == "nested":
            return (
                "Accelerate cannot express granularity 'nested' (nested_compile_region); "
                "use autotune.apply(model, file) to compile it as measured"
            )
        if s.granularity != "none" and s.backend not in ACCELERATE_BACKENDS:
            return f"Accelerate's DynamoBackend has no backend {s.backend!r}"
        return None

    def to_accelerate(self, *, approximate: bool = False) -> dict[str, Any]:
        """``TorchDynamoPlugin`` fields. Raises ``NotApplicable`` where Accelerate cannot say it.

        With ``approximate=True`` a ``nested`` strategy becomes its nearest expressible form
        (one full compile); callers must show :meth:`accelerate_caveat` beside it.
        """
        s = self.canonical()
        caveat = s.accelerate_caveat()
        if caveat and not (approximate and s.granularity == "nested"):
            raise NotApplicable(caveat)
        if s.granularity == "none":
            return {
                "backend": "no",
                "mode": None,
                "fullgraph": False,
                "dynamic": None,
                "use_regional_compilation": False,
            }
        return {
            "backend": s.backend,
            "mode": s.mode,
            "fullgraph": s.fullgraph,
            "dynamic": s.dynamic,
            "use_regional_compilation": s.granularity == "regional",
        }

    @classmethod
    def from_accelerate(cls, fields: dict[str, Any] | Any) -> Strategy:
        """Read ``TorchDynamoPlugin`` fields (a dict, or the plugin itself)."""
        if not isinstance(fields, dict):
            fields = {
                name: getattr(fields, name)
                for name in ("backend", "mode", "fullgraph", "dynamic", "use_regional_compilation")
            }
        backend = fields.get("backend") or "no"
        backend = str(getattr(backend, "value", backend)).lower()
        if backend == "no":
            return cls.create("none")
        granularity = "regional" if fields.get("use_regional_compilation") else "full"
        return cls.create(
            granularity,
            backend,
            fields.get("mode"),
            fields.get("dynamic"),
            bool(fields.get("fullgraph")),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Strategy:
        return cls.create(**data)


def _torch_version() -> str:
    import torch

    return torch.__version__
