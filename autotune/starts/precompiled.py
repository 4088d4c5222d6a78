"""Starts that skip the compiler: a precompiled function and an AOTInductor package.

What is left of a warm start is Dynamo's tracing, which no cache skips. Two torch 2.13 APIs skip
it, and autotune measures both as starts of their own:

- ``precompiled``: ``torch.compile(forward, fullgraph=True).aot_compile(((model, *inputs),
  {}))``, saved with ``save_compiled_function`` and loaded with
  ``torch.compiler.load_compiled_function`` (experimental; its guards are fixed to the example
  inputs; backends inductor, eager and aot_eager);
- ``aot``: ``torch.export.export`` then ``torch._inductor.aoti_compile_and_package``, loaded with
  ``torch._inductor.aoti_load_package`` (Inductor only, inference only, an exportable graph).

The cold trial's process builds them after it has measured (its caches are warm by then), and a
fresh process with empty caches loads one and makes the first call: that is the start. Both
files run code when loaded (as ``torch.load(weights_only=False)`` does): autotune loads one only
in its own trials, or for a user who said they trust it (:mod:`autotune.starts.artifact`).
Where a kind does not apply, :func:`not_applicable` says why in one line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.errors import shorten, where
from autotune.start_kinds import AHEAD, BY_NAME
from autotune.strategy import Strategy

SUFFIX = {k: BY_NAME[k].suffix for k in AHEAD}
PRECOMPILE_BACKENDS = ("inductor", "eager", "aot_eager")


def not_applicable(kind: str, strategy: Strategy, workload_kind: str, breaks: int) -> str:
    """Why ``kind`` cannot start ``strategy`` ("" when it can)."""
    if strategy.granularity == "none":
        return "eager compiles nothing"
    if workload_kind != "inference":
        return f"a {kind} start is built for inference: the {workload_kind} workload has none yet"
    if strategy.granularity != "full":
        how = "each block on its own" if strategy.granularity == "regional" else "nested regions"
        return (f"a {kind} start is built for one compiled graph: granularity "
                f"{strategy.granularity!r} compiles {how}, for which autotune has no "
                "ahead-of-time artefact yet")  # fmt: skip
    if breaks:
        return f"a {kind} start needs one graph (fullgraph), and this one has {breaks} break(s)"
    if kind == "precompiled" and strategy.backend not in PRECOMPILE_BACKENDS:
        takes = ", ".join(PRECOMPILE_BACKENDS)
        return f"precompile takes backends {takes}, not {strategy.backend!r}"
    if kind == "aot" and strategy.backend != "inductor":
        return f"AOTInductor compiles with Inductor: backend {strategy.backend!r} has no package"
    if kind == "aot" and strategy.uses_cuda_graphs():
        return "AOTInductor packages no CUDA graphs: this strategy replays them"
    if strategy.uses_cuda_graphs():  # torch: aot_autograd_result.deserialize_bundled_cache_entry
        return ("torch loads a precompiled function with the process's triton.cudagraphs (off), "
                "not the strategy's: it would run without CUDA graphs")  # fmt: skip
    return ""


def build(kind: str, model: Any, inputs: tuple, strategy: Strategy, path: str) -> dict[str, Any]:
    """Build and save the ``kind`` artefact of ``strategy`` for ``model`` at ``path``; its
    size, build time and fingerprint, or ``error`` (one line) where torch could not."""
    import torch

    from autotune.starts import artifact

    start = time.perf_counter()
    try:
        with torch.no_grad():
            if kind == "precompiled":
                kwargs = {**strategy.compile_kwargs(), "fullgraph": True}
                fn = torch.compile(type(model).forward, **kwargs)
                fn.aot_compile(((model, *inputs), {})).save_compiled_function(path)
            else:
                program = torch.export.export(model, tuple(inputs))
                torch._inductor.aoti_compile_and_package(
                    program, package_path=path, inductor_configs=strategy.inductor_options()
                )
    except Exception as exc:  # torch's refusal: that kind does not apply to this strategy
        text = shorten(str(exc), 300)
        if "guard cannot be serialized" in text:  # Dynamo's PackageError
            text += (" (the model's guards cannot be saved; a guard_filter_fn such as "
                     "torch.compiler.keep_portable_guards_unsafe drops them, with their "
                     "checks)")  # fmt: skip
        at = where(exc)  # the frames it arose in: torch's export, a model's forward
        return {"error": f"{kind} build failed: {type(exc).__name__}: {text}"
                + (f" (at {at})" if at else "")}  # fmt: skip
    first = next(model.parameters(), None)
    device = str(first.device) if first is not None else "cpu"
    return {"bytes": Path(path).stat().st_size, "build_s": time.perf_counter() - start,
            "fingerprint": artifact.requirements(device)}  # fmt: skip


def load(kind: str, path: str, model: Any) -> Callable[..., Any]:
    """The callable a ``kind`` artefact holds, ready for ``fn(*inputs)`` (this runs its code:
    callers load only what they made or what the user trusts)."""
    import torch

    if kind == "precompiled":
        with open(path, "rb") as f:
            fn = torch.compiler.load_compiled_function(f)
        return lambda *args: fn(model, *args)
    package = torch._inductor.aoti_load_package(path)
    return lambda *args: package(*args)


class Precompiled:
    """A module that runs an ahead-of-time artefact instead of compiling: what
    :func:`autotune.apply` returns when it loaded one. Attribute reads fall through to the
    model it was made for."""

    def __init__(self, model: Any, fn: Callable[..., Any], kind: str) -> None:
        self.model, self.fn, self.kind = model, fn, kind

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def frames_compiled() -> int:
    """Frames Dynamo compiled in this process (its private counters, read here alone: a start
    that skips the compiler keeps this at zero)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def isa_probes_s() -> float:
    """Seconds Inductor's first CPU load spends probing vector ISAs with the host compiler
    (pytorch/pytorch#191715; ``TORCHINDUCTOR_VEC_ISA_OK=1`` skips most of them), timed alone
    before a load so that the load's figure can say how much of it they were. Torch's private
    function, read here alone (its result is cached, so the load does not probe again)."""
    from torch._inductor import cpu_vec_isa

    start = time.perf_counter()
    cpu_vec_isa.valid_vec_isa_list()
    return time.perf_counter() - start
