"""The toy model of PyTorch's regional-compilation recipe: a Linear, then N identical blocks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from autotune.workload import Workload

DEFAULT_LAYERS = 64


class Layer(torch.nn.Module):
    """One repeated block: Linear, ReLU, sigmoid, Linear, ReLU (exactly as in the recipe)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear1 = torch.nn.Linear(10, 10)
        self.relu1 = torch.nn.ReLU()
        self.linear2 = torch.nn.Linear(10, 10)
        self.relu2 = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.linear1(x)
        a = self.relu1(a)
        a = torch.sigmoid(a)
        b = self.linear2(a)
        b = self.relu2(b)
        return b


class Toy(torch.nn.Module):
    """The recipe's ``Model``: one Linear followed by ``n_layers`` :class:`Layer` blocks."""

    def __init__(self, n_layers: int = DEFAULT_LAYERS) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(10, 10)
        self.layers = torch.nn.ModuleList([Layer() for _ in range(n_layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        for layer in self.layers:
            x = layer(x)
        return x


def build_toy(
    n_layers: int, seed: int, workload: Workload
) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """Build the toy with torch's default init drawn from ``seed``; input is one 10x10 tensor.

    The global RNG is left untouched. The batch size and sequence length of the workload do not
    apply: the recipe's input is always ``torch.randn(10, 10)``.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Toy(n_layers)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(10, 10, generator=generator)
    model = model.to(device=workload.device, dtype=workload.torch_dtype).eval()
    return model, (x.to(device=workload.device, dtype=workload.torch_dtype),)
