"""Timers: CUDA events on a GPU, perf_counter after synchronize elsewhere; interleaved runs."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


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
    calls: dict[str, Callable[[], Any]], iters: int, timer: Callable[[Callable[[], Any]], T],
    seed: int = 0, after_round: Callable[[dict[str, list[T]]], None] | None = None,
) -> dict[str, list[T]]:  # fmt: skip
    """Time each call ``iters`` times with ``timer`` (one call -> its sample), in a random order
    per round; ``after_round`` sees the samples so far after each round.

    Interleaving, as PyTorch's own benchmark harness does, spreads drift in the machine's
    speed (other load, frequency changes) over every call alike.
    """
    rng = random.Random(seed)
    samples: dict[str, list[T]] = {name: [] for name in calls}
    names = list(calls)
    for _ in range(iters):
        rng.shuffle(names)
        for name in names:
            samples[name].append(timer(calls[name]))
        if after_round is not None:
            after_round(samples)
    return samples
