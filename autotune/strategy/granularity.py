"""apply(model, strategy): compile a model at one granularity, never mutating the user's model.

- ``none``: the model itself (eager, the baseline).
- ``full``: ``torch.compile(model)``.
- ``regional``: Accelerate's ``compile_regions`` rule: every ``nn.ModuleList`` whose children
  share one class has each child compiled on its own; the other leaves are compiled separately.
- ``nested``: each repeated block's forward is marked ``torch.compiler.nested_compile_region``
  (on copies of the blocks, through a fresh subclass) and the whole model is compiled once.

``regional`` and ``nested`` build a new module tree that shares parameters with the original;
the original modules and their classes are left exactly as they were.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune import device, usercode
from autotune.errors import NotApplicable
from autotune.strategy import shapes
from autotune.strategy.strategy import Strategy

if TYPE_CHECKING:
    import torch


def is_repeated_blocks(module: torch.nn.Module) -> bool:
    """An ``nn.ModuleList`` whose children all share the first child's class."""
    import torch

    return (
        isinstance(module, torch.nn.ModuleList)
        and len(module) > 0
        and all(isinstance(m, module[0].__class__) for m in module)
    )


def has_repeated_blocks(module: torch.nn.Module) -> bool:
    """Whether repeated blocks appear anywhere in the module tree."""
    return bool(module._modules) and any(is_repeated_blocks(m) for m in module.modules())


def shallow_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A new module object sharing parameters, buffers and attributes with ``module``. Its hook
    dictionaries are its own (holding the hooks ``module`` has now): a hook registered on the
    copy, such as a CUDA-graph step mark, never lands on ``module``."""
    new = module.__class__.__new__(module.__class__)
    new.__dict__.update(module.__dict__)
    for name, value in list(new.__dict__.items()):
        if getattr(value, "__self__", None) is module and hasattr(value, "__func__"):
            new.__dict__[name] = types.MethodType(value.__func__, new)  # a method on the instance
        elif "_hooks" in name and isinstance(value, dict):  # _forward_pre_hooks, ...
            new.__dict__[name] = type(value)(value)
    new._modules = dict(module._modules)
    return new


Transform = Callable[["torch.nn.Module"], "torch.nn.Module"]


def _rebuild(module: torch.nn.Module, block: Transform, other: Transform) -> torch.nn.Module:
    """Copy the path down to the repeated blocks, transforming blocks and the other leaves."""
    import torch

    if is_repeated_blocks(module):
        return torch.nn.ModuleList([block(m) for m in module])
    if has_repeated_blocks(module):
        new = shallow_copy(module)
        for name, child in module.named_children():
            new._modules[name] = _rebuild(child, block, other)
        return new
    return other(module)


def _require_blocks(model: torch.nn.Module, strategy: Strategy) -> None:
    if not has_repeated_blocks(model):
        raise NotApplicable(
            f"granularity {strategy.granularity!r} needs repeated blocks (an nn.ModuleList of "
            f"one class), and {type(model).__name__} has none"
        )


def _mark_nested(block: torch.nn.Module, marked: dict[type, type]) -> torch.nn.Module:
    """A copy of ``block`` whose class is a fresh subclass with a marked forward.

    The mark must sit on a class: dynamo reuses the first block's weights for every block when
    the marked forward is bound on the instance instead (wrong answers, silently).
    """
    import torch

    cls = type(block)
    if cls not in marked:  # one subclass per class, so every block shares one subgraph
        forward = torch.compiler.nested_compile_region(cls.forward)
        marked[cls] = type(
            cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__}
        )
    new = shallow_copy(block)
    new.__class__ = marked[cls]
    return new


def apply(
    model: torch.nn.Module, strategy: Strategy,
    resolve: Callable[[str, str], Any] = usercode.resolve, traffic: Any = (),
) -> torch.nn.Module:  # fmt: skip
    """Return ``model`` compiled as ``strategy`` says; raises ``NotApplicable`` if it cannot be.
    A ``package.module:function`` backend is found by ``resolve`` (see autotune.usercode).
    A strategy for a traffic pads to buckets or marks dimensions (:mod:`.shapes`); quantile
    buckets take their edges from ``traffic`` (the requests it was measured on), auto buckets
    from the strategy's own."""
    s = strategy
    if s.granularity == "none":
        return model
    return shapes.wrap(
        _compiled(model, s, resolve), model, s.buckets, s.marks, s.stance, traffic, s.edges
    )


def _compiled(
    model: torch.nn.Module, s: Strategy, resolve: Callable[[str, str], Any]
) -> torch.nn.Module:
    import torch

    kwargs = s.compile_kwargs(resolve)
    if s.granularity == "full":
        return _marked(torch.compile(model, **kwargs), model, s)
    _require_blocks(model, s)

    def compile_one(module: torch.nn.Module) -> torch.nn.Module:
        return torch.compile(module, **kwargs)

    if s.granularity == "regional":
        new = _rebuild(model, compile_one, compile_one)
        new.__dict__.setdefault("_orig_mod", model)  # as Accelerate keeps it, to unwrap later
        return _marked(new, model, s)
    marked: dict[type, type] = {}
    new = _rebuild(model, lambda b: _mark_nested(b, marked), lambda m: m)
    return _marked(torch.compile(new, **kwargs), model, s)


def _marked(compiled: torch.nn.Module, model: torch.nn.Module, s: Strategy) -> torch.nn.Module:
    """A CUDA-graph strategy on a CUDA model marks a new step before every call, so that one
    call's graphs never read outputs that the next call overwrites (regional compiles chain
    one graph per block; a graph break splits one)."""
    where = next(iter(model.parameters()), None)
    if where is not None and device.marks_steps(str(where.device), s.uses_cuda_graphs()):
        device.mark_each_call(compiled)
    return compiled


def count_regions(module: torch.nn.Module) -> int:
    """How many separately compiled modules the tree holds."""
    from torch._dynamo.eval_frame import OptimizedModule

    return sum(isinstance(m, OptimizedModule) for m in module.modules())


def allocate_cache(cache: Any, model: torch.nn.Module, batch: int, device: Any) -> None:
    """Allocate a static KV cache's tensors now, before a compiled call can: transformers
    allocates them lazily, on the first update, and inside a compiled prefill that update is
    traced, so ``mark_static_address`` is skipped and the tensors become the graph's outputs
    (with CUDA graphs, outputs of the prefill's graph that decode then mutates). The shapes are
    the config's own (:func:`cache_shape`), the dtype the model's. A cache that is not static,
    is allocated already, or whose shapes the config does not give plainly (MLA) is left as it
    is."""
    if not getattr(cache, "is_compileable", False) or getattr(cache, "is_initialized", True):
        return
    found = cache_shape(getattr(model, "config", None))
    if found is not None:
        cache.early_initialization(batch, *found, model.dtype, device)


def cache_shape(config: Any) -> tuple[int, int] | None:
    """The key/value heads and head size of a decoder's attention, from its config's public
    fields (``num_key_value_heads``, ``head_dim``, else ``hidden_size / num_attention_heads``);
    None where they do not say it plainly (MLA's compressed keys, no attention fields)."""
    if config is None:
        return None
    text = (
        config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    )
    if getattr(text, "kv_lora_rank", None) or getattr(text, "qk_rope_head_dim", None):
        return None
    attention = getattr(text, "num_attention_heads", None)
    heads = getattr(text, "num_key_value_heads", None) or attention
    size = getattr(text, "head_dim", None)
    if not size and attention and getattr(text, "hidden_size", None):
        size = text.hidden_size // attention
    return (int(heads), int(size)) if heads and size else None


def _allocating(
    forward: Callable[..., Any], model: torch.nn.Module, eager_prefill: bool = False
) -> Callable[..., Any]:
    """``forward`` that first allocates the static KV cache it is handed (a fresh one, lazily
    initialised, for each ``generate`` call): :func:`allocate_cache`. With ``eager_prefill``, a
    call of more than one token a sequence (a prefill) runs ``model``'s own forward instead, as
    transformers' generate compiles only the decode steps."""

    @functools.wraps(model.forward)  # generate reads the forward's signature
    def call(*args: Any, **kwargs: Any) -> Any:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        if cache is not None and ids is not None:
            allocate_cache(cache, model, ids.shape[0], ids.device)
        if eager_prefill and ids is not None and ids.dim() > 1 and ids.shape[1] > 1:
            return model.forward(*args, **kwargs)
        return forward(*args, **kwargs)

    return call


def generator(
    model: torch.nn.Module,
    strategy: Strategy,
    resolve: Callable[[str, str], Any] = usercode.resolve,
    traffic: Any = (),
) -> torch.nn.Module:
    """A model of the same class, sharing parameters, whose forward runs ``strategy``.

    ``generate`` on it runs the compiled forward: a full or nested compile is wrapped in a
    shallow copy whose ``forward`` calls it (``generate`` on a ``torch.compile`` wrapper would run
    the uncompiled model); a regional compile is already a copy of the model's class. Either
    way the forward allocates a static KV cache before the compiled call sees it
    (:func:`allocate_cache`); with ``prefill="eager"`` a prefill runs the model's own forward,
    with buckets it is padded to its bucket (:mod:`.prefill`: quantiles' edges from the prompt
    lengths of ``traffic``).
    """
    import dataclasses

    from torch._dynamo.eval_frame import OptimizedModule

    from autotune.strategy import prefill

    compiled = apply(model, dataclasses.replace(strategy, buckets="none"), resolve)
    if compiled is model:
        return model  # eager: nothing is compiled, the cache may be allocated lazily
    eager_prefill = strategy.prefill == "eager"
    found = prefill.edges_of(strategy.buckets, [s for _, s in traffic])
    regional = not isinstance(compiled, OptimizedModule)
    call = compiled.forward if regional else compiled
    if strategy.buckets != "none":
        from autotune.environment import check_padded_prefill

        check_padded_prefill()  # ...on a transformers that has what the padding needs
        call = prefill.padding(call, model, strategy.buckets, found)
    if regional:  # a new tree of the model's class
        compiled.forward = _allocating(call, model, eager_prefill)
        return compiled
    gen = shallow_copy(model)
    forward = _allocating(call, model, eager_prefill)
    forward.compiled = compiled  # type: ignore[attr-defined]  # for count_regions
    gen.forward = forward
    return gen
