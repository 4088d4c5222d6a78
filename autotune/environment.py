"""The environment fingerprint: what a measurement's numbers depend on besides the strategy."""

from __future__ import annotations

import os
import platform
from typing import Any

import autotune.device


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


ISAS = (("avx512", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}), ("avx2", {"avx2", "fma"}),
        ("sve", {"sve"}), ("neon", {"asimd"}))  # fmt: skip  # the vector ISAs Inductor targets


def cpu_flags() -> set[str]:
    """The CPU's feature flags, from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_isa() -> str:
    """The best vector instruction set this CPU has of those Inductor compiles for (from the
    CPU's own flags: no compiler is run), else the machine's architecture."""
    flags = cpu_flags()
    return next((name for name, need in ISAS if need <= flags), platform.machine())


BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # native bfloat16 matmul instructions, best first


def cpu_bf16() -> str:
    """The CPU's native bfloat16 matmul instructions (``amx_bf16,avx512_bf16``), or "none":
    without them torch's bfloat16 GEMMs take a fallback that can be 100x slower."""
    flags = cpu_flags()
    return ",".join(f for f in BF16_FLAGS if f in flags) or "none"


SLOW = 4.0  # a dtype whose matmuls run this many times slower than float32's is named


def matmul_ratio(dtype: str) -> float:
    """How many times longer a 64x1024 @ 1024x1024 matmul takes in ``dtype`` than in float32
    on this CPU (the median of 3 after a warm-up, each side): without native bfloat16
    instructions, torch takes a fallback GEMM that can be 100x slower."""
    import statistics
    import time

    import torch

    def median_s(kind: Any) -> float:
        a, b = torch.randn(64, 1024).to(kind), torch.randn(1024, 1024).to(kind)
        a @ b
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            a @ b
            runs.append(time.perf_counter() - start)
        return statistics.median(runs)

    return median_s(getattr(torch, dtype)) / median_s(torch.float32)


def slow_dtype(dtype: str, device: str) -> str:
    """One line when ``dtype``'s matmuls run :data:`SLOW` times slower than float32's on this
    CPU, with the measured ratio and what to try; "" otherwise (and on a GPU)."""
    import torch

    if device != "cpu" or dtype not in ("bfloat16", "float16"):
        return ""
    ratio = matmul_ratio(dtype)
    if ratio < SLOW:
        return ""
    return (f"note: {dtype} matmuls run {ratio:.0f}x slower than float32 here ({cpu_model()}, "
            f"torch's CPU capability {torch.backends.cpu.get_cpu_capability()}): every call "
            f"this search times will; try --dtype float32, or a machine with native {dtype} "
            "(AMX or AVX-512 BF16)")  # fmt: skip


def fingerprint(device: str = "cpu", dtype: str | None = None) -> dict[str, Any]:
    """torch and CUDA versions, the device (name; on a GPU its compute capability, driver,
    Triton and the float32 matmul precision a trial of ``dtype`` runs with), CPU model, torch's
    CPU capability, native bfloat16 instructions and core count, Python."""
    import torch

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device,
        "device_name": cpu_model(),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16": cpu_bf16(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
    return {**env, **autotune.device.traits(device, dtype)}
