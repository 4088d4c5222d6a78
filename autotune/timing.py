"""Timers: CUDA events on a GPU, perf_counter after synchronize elsewhere; interleaved runs."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any


def synchronize(device: str) -> None:
    """Wait for the device's queued work, so a timer read covers it (gpt-fast's device_sync)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def wall(fn: Callable[[], Any], device: str) -> tuple[float, Any]:
    """Wall seconds of one synchronized call, and its result (first calls, compiles)."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return time.perf_counter() - start, out


def timed(fn: Callable[[], Any], device: str) -> float:
    """Seconds of one steady-state call: CUDA events on a GPU, perf_counter on a CPU."""
    if not device.startswith("cuda"):
        return wall(fn, device)[0]
    import torch

    stream = torch.cuda.current_stream(torch.device(device))  # the device's, not the current one's
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def interleave(
    fns: dict[str, Callable[[], Any]], iters: int, warmup: int, device: str, seed: int = 0
) -> dict[str, list[float]]:
    """Time each function ``iters`` times after ``warmup`` calls, in a random order per round.

    Interleaving, as PyTorch's own benchmark harness does, spreads drift in the machine's
    speed (other load, frequency changes) over every function alike.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    synchronize(device)
    rng = random.Random(seed)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for _ in range(iters):
        rng.shuffle(names)
        for name in names:
            samples[name].append(timed(fns[name], device))
    return samples
