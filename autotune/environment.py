"""The environment fingerprint: what a measurement's numbers depend on besides the strategy."""

from __future__ import annotations

import os
import platform
from typing import Any

from autotune import device as devices


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


def cpu_isa() -> str:
    """The best vector instruction set this CPU has of those Inductor compiles for (from the
    CPU's own flags: no compiler is run), else the machine's architecture."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return next((name for name, need in ISAS if need <= flags), platform.machine())


def fingerprint(device: str = "cpu", dtype: str | None = None) -> dict[str, Any]:
    """torch and CUDA versions, the device (name; on a GPU its compute capability, driver,
    Triton and the float32 matmul precision a trial of ``dtype`` runs with), CPU model and core
    count, Python."""
    import torch

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device,
        "device_name": cpu_model(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
    return {**env, **devices.fingerprint(device, dtype)}
