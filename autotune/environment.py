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


_RATIOS: dict[tuple[Any, ...], float] = {}  # measured once per process and kind of GEMM


def matmul_ratio(dtype: str) -> float:
    """How many times longer a 64x1024 @ 1024x1024 matmul takes in ``dtype`` than in float32
    on this CPU (the median of 3 after a warm-up, each side): without native bfloat16
    instructions, torch takes a fallback GEMM that can be 100x slower. Measured once a process
    for each ``dtype``, oneDNN switch and thread count."""
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

    key = (dtype, torch.backends.mkldnn.enabled, torch.get_num_threads())
    if key not in _RATIOS:
        _RATIOS[key] = median_s(getattr(torch, dtype)) / median_s(torch.float32)
    return _RATIOS[key]


def _where() -> str:
    import torch

    return f"{cpu_model()}, torch's CPU capability {torch.backends.cpu.get_cpu_capability()}"


def slow_dtype(dtype: str, device: str) -> str:
    """One line when ``dtype``'s matmuls run :data:`SLOW` times slower than float32's on this
    CPU, with the measured ratio and what to try; "" otherwise (and on a GPU)."""
    if device != "cpu" or dtype not in ("bfloat16", "float16"):
        return ""
    ratio = matmul_ratio(dtype)
    if ratio < SLOW:
        return ""
    return (f"note: {dtype} matmuls run {ratio:.0f}x slower than float32 here ({_where()}): "
            f"every call this search times will; try --dtype float32 (or --dtype auto), or a "
            f"machine with native {dtype} (AMX or AVX-512 BF16)")  # fmt: skip


def auto_dtype(device: str) -> tuple[str, str]:
    """``--dtype auto``: the dtype a model is served in on ``device``, and one line saying why.
    A CPU: bfloat16 where its matmuls run less than :data:`SLOW` times float32's (native AMX or
    AVX-512 BF16), else float32. A GPU: bfloat16 where it has it, else float16."""
    if autotune.device.is_cuda(device):
        if autotune.device.native_bfloat16(device):
            return "bfloat16", "dtype auto: bfloat16 (this GPU computes in it natively)"
        return "float16", "dtype auto: float16 (this GPU has no native bfloat16)"
    ratio = matmul_ratio("bfloat16")
    if ratio < SLOW:
        return "bfloat16", (f"dtype auto: bfloat16, whose matmuls take {ratio:.2g}x float32's "
                            f"time here ({_where()})")  # fmt: skip
    return "float32", (f"dtype auto: float32, as bfloat16 matmuls run {ratio:.0f}x slower than "
                       f"float32 here ({_where()})")  # fmt: skip


def dtype_line(asked: str | None, dtype: str, device: str) -> str:
    """What a search says of its dtype before its first trial: what ``--dtype auto`` chose and
    why, or that the dtype asked for is slow here (:func:`slow_dtype`); "" when neither."""
    if asked == "auto":
        return auto_dtype(device)[1]
    return slow_dtype(dtype, device)


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
