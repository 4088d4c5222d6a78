"""Random weights for a transformers model, made fast: a skeleton without init, then weights
copied from a seeded random pool.

transformers' default init draws every weight with ``normal_`` (over 30 s for Gemma-2B in bf16 on
a small CPU). Here parameters are created on the meta device while buffers (rotary ``inv_freq``,
Gemma's ``embed_scale``, ...) are computed for real by the model's own ``__init__``. Then every
parameter is allocated once in the target dtype and filled by copying windows of one seeded pool
of normal samples, so the weights are deterministic, finite and cost about one memory copy.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Odd, so windows of the pool do not repeat in step with power-of-two row widths.
POOL_SIZE = 4_194_301


@contextmanager
def skeleton(dtype: torch.dtype) -> Iterator[None]:
    """Create parameters on the meta device (no init cost) and buffers for real, in ``dtype``."""
    import torch

    original = torch.nn.Module.register_parameter

    def register(module: torch.nn.Module, name: str, param: Any) -> None:
        original(module, name, param)
        if param is not None and param.device.type != "meta":  # tying re-registers meta params
            meta = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
            module._parameters[name] = meta

    previous = torch.get_default_dtype()
    torch.nn.Module.register_parameter = register  # type: ignore[method-assign]
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]
        torch.set_default_dtype(previous)


class Pool:
    """Seeded normal samples on the device; a tensor is filled with windows picked by its name."""

    def __init__(self, seed: int, device: str, dtype: torch.dtype) -> None:
        import torch

        generator = torch.Generator().manual_seed(seed)
        # Drawn on the CPU so every device sees the same values; float32 only for the pool itself.
        self.base = torch.randn(POOL_SIZE, generator=generator).to(device)
        self.dtype = dtype
        self.scaled: dict[float, torch.Tensor] = {}

    def fill(self, tensor: torch.Tensor, name: str, std: float) -> None:
        """Fill ``tensor`` in place with N(0, std) values, deterministic in (seed, name)."""
        import torch

        if std not in self.scaled:
            window = (self.base * std).to(self.dtype)
            self.scaled[std] = torch.cat((window, window))  # any window of POOL_SIZE is contiguous
        pool = self.scaled[std]
        flat = tensor.view(-1)
        for chunk, start in enumerate(range(0, flat.numel(), POOL_SIZE)):
            size = min(POOL_SIZE, flat.numel() - start)
            offset = zlib.crc32(f"{name}#{chunk}".encode()) % POOL_SIZE
            flat[start : start + size].copy_(pool[offset : offset + size])


def materialize(model: torch.nn.Module, seed: int, device: str, dtype: torch.dtype) -> None:
    """Give every meta parameter real storage on ``device`` and a sane deterministic value.

    Matrices and embeddings get N(0, initializer_range); biases zeros; other vectors (norms) ones,
    then the model's own ``_init_weights`` on modules holding only vectors (Gemma's RMSNorm ->
    zeros). Shared (tied) parameters stay one object. Buffers keep the values ``__init__`` made.
    """
    import torch

    config = getattr(model, "config", None)
    std = float(getattr(config, "initializer_range", None) or 0.02)
    pool = Pool(seed, device, dtype)
    done: dict[int, torch.nn.Parameter] = {}
    vectors_only: list[torch.nn.Module] = []
    with torch.no_grad():
        for module_name, module in model.named_modules():
            own = [(name, p) for name, p in module._parameters.items() if p is not None]
            for name, param in own:
                if id(param) not in done:
                    full = f"{module_name}.{name}" if module_name else name
                    done[id(param)] = _make(param, full, name, pool, std, device, dtype)
                module._parameters[name] = done[id(param)]
            padding = getattr(module, "padding_idx", None)
            if isinstance(module, torch.nn.Embedding) and padding is not None:
                module.weight[padding].zero_()
            if own and all(param.dim() < 2 for _, param in own):
                vectors_only.append(module)
        own_init = getattr(model, "_init_weights", None)
        if own_init is not None and vectors_only:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                for module in vectors_only:
                    own_init(module)
    model.to(device)  # buffers were computed on the CPU


def _make(
    param: torch.Tensor,
    full: str,
    name: str,
    pool: Pool,
    std: float,
    device: str,
    dtype: torch.dtype,
) -> torch.nn.Parameter:
    import torch

    data = torch.empty(param.shape, device=device, dtype=_dtype(param, dtype))
    if not data.is_floating_point():
        data.zero_()
    elif data.dim() >= 2:
        pool.fill(data, full, std)
    elif name == "bias":
        data.zero_()
    else:
        data.fill_(1.0)
    return torch.nn.Parameter(data, requires_grad=param.requires_grad)


def _dtype(param: torch.Tensor, dtype: torch.dtype) -> torch.dtype:
    return dtype if param.is_floating_point() else param.dtype
