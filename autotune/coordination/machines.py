"""Whether a machine may join a study: the fields of its environment that must agree with the
study's, so that measurements made on many machines mean the same."""

from __future__ import annotations

from typing import Any

from autotune.errors import ConfigError

COMPARABLE = ("torch", "cuda", "device", "device_name")
ON_CPU = ("cpu_capability", "cpu_bf16")  # where the study recorded them (older studies did not)
# what else must agree between GPU machines (float32 matmuls in TF32 or not)
ON_GPU = ("triton", "capability", "driver", "float32_matmul_precision")


def comparable(environment: dict[str, Any]) -> dict[str, Any]:
    """The fields that must agree, with ``cuda:1`` read as ``cuda`` (the index is no hardware);
    on a GPU also Triton, the compute capability and the driver; torch's CPU capability and the
    CPU's native bfloat16 instructions where recorded (a CPU model name can hide either)."""
    values = {k: environment.get(k) for k in COMPARABLE}
    values["device"] = str(values["device"] or "").partition(":")[0] or None
    if values["device"] == "cuda":
        values.update({k: environment.get(k) for k in ON_GPU})
    values.update({k: environment[k] for k in ON_CPU if k in environment})
    return values


def check_environment(stored: dict[str, Any], here: dict[str, Any], force: bool) -> None:
    """Refuse to mix measurements from another GPU, CPU or torch, unless forced."""
    a, b = comparable(stored), comparable(here)  # what the study recorded must agree
    differ = [k for k in a if a[k] != b.get(k)]
    if differ and not force:
        detail = ", ".join(f"{k}: study {a[k]!r} vs here {b[k]!r}" for k in differ)
        raise ConfigError(
            f"this machine differs from the study's ({detail}); mixed measurements would be "
            "meaningless (use --force to join anyway)"
        )
