"""The device: the one module that touches ``torch.cuda``. Everything else asks it.

It resolves a device string, makes a CUDA device current, and synchronises before a timer read.
"""

from __future__ import annotations


def use(device: str) -> None:
    """Make ``device`` the current CUDA device, where CUDA events and graphs are recorded."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(torch.device(device))


def marks_steps(device: str, cuda_graphs: bool) -> bool:
    """Whether each call must begin with ``torch.compiler.cudagraph_mark_step_begin()``: a
    strategy that replays CUDA graphs, on a CUDA device."""
    return device.startswith("cuda") and cuda_graphs
