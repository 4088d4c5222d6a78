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


def available(device: str) -> int:
    """Bytes of memory free for a new copy of a model on ``device`` (the CPU's MemAvailable)."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
