"""Forty pointwise steps over a (batch, seq, 1024) activation: eager runs forty kernels and
writes forty intermediates; Inductor fuses them into one loop. The issue's model "where Inductor
doubles the speed" (about 2x eager here, a 10-25 s compile):

    autotune search --model bench.models.pointwise:model --seq-len 32..128 --requests 6 \\
        --starts cold --time-budget 2m
"""

from __future__ import annotations

import torch

WIDTH = 1024
STEPS = 40


class Pointwise(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.linspace(0.9, 1.1, WIDTH))
        self.shift = torch.nn.Parameter(torch.linspace(-0.1, 0.1, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(STEPS):
            x = torch.tanh(x * self.scale + self.shift) if i % 2 else x * 0.5 + 0.25 * x.sin()
        return x


def model() -> tuple[torch.nn.Module, tuple]:
    return Pointwise(), (torch.randn(1, 64, WIDTH),)


model.make_inputs = lambda batch, seq: (torch.randn(batch, seq, WIDTH),)  # type: ignore[attr-defined]
