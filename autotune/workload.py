"""What is measured (batch, sequence length, dtype, device, and inference, train or generate)
and how each trial times it (``Settings``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from autotune.errors import ConfigError
from autotune.starts import STARTS
from autotune.starts import parse as parse_starts

DTYPES = ("float32", "bfloat16", "float16")
KINDS = ("inference", "train", "generate")


def resolve_device(device: str) -> str:
    """Turn ``auto`` into ``cuda`` or ``cpu``; check that an asked-for CUDA device exists."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or device.startswith("cuda:"):
        index = device.partition(":")[2]
        if index and not index.isdigit():
            raise ConfigError(f"bad device {device!r}: use auto, cpu, cuda or cuda:N")
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {device} asked for, but this torch sees no CUDA device")
        if index and int(index) >= torch.cuda.device_count():
            raise ConfigError(
                f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) visible"
            )
        return device
    raise ConfigError(f"bad device {device!r}: use auto, cpu, cuda or cuda:N")


@dataclass(frozen=True)
class Workload:
    """The input shape, precision, device and step that every trial of a study measures."""

    batch_size: int = 1
    seq_len: int = 32
    dtype: str = "float32"
    device: str = "cpu"
    kind: str = "inference"
    new_tokens: int = 32  # generate: tokens per generation (the prefill's, then decode steps)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"bad dtype {self.dtype!r}: use one of {', '.join(DTYPES)}")
        if self.kind not in KINDS:
            raise ConfigError(f"bad workload {self.kind!r}: use one of {', '.join(KINDS)}")
        if self.batch_size < 1 or self.seq_len < 1:
            raise ConfigError("--batch-size and --seq-len must be at least 1")
        if self.kind == "generate" and self.new_tokens < 2:
            raise ConfigError("--new-tokens must be at least 2: the prefill gives the first, "
                              "decode steps the rest")  # fmt: skip
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ConfigError(f"bad device {self.device!r}: use auto, cpu, cuda or cuda:N")

    @classmethod
    def create(cls, device: str = "auto", **fields: Any) -> Workload:
        """Build a workload, resolving ``auto`` and checking the device against this machine."""
        return cls(device=resolve_device(device), **fields)

    @property
    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if self.kind != "generate":  # other workloads' stored dicts stay as they were
            del data["new_tokens"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        return cls(**data)

    @property
    def cache_len(self) -> int:
        """The static KV cache's length for ``generate``: the prompt plus the new tokens."""
        return self.seq_len + self.new_tokens

    def slug(self) -> str:
        """A short readable name, e.g. ``inference-b1-s32-bfloat16-cpu``"""
        device = self.device.replace(":", "")
        tokens = f"-n{self.new_tokens}" if self.kind == "generate" else ""
        return f"{self.kind}-b{self.batch_size}-s{self.seq_len}{tokens}-{self.dtype}-{device}"


@dataclass(frozen=True)
class Settings:
    """How a trial is timed: timed calls, warm-up calls, the child's timeout (per start), the
    RNG seed, and which starts to measure (cold, warm, portable)."""

    iters: int = 20
    warmup: int = 3
    timeout_s: float = 1200.0
    seed: int = 0
    starts: tuple[str, ...] = STARTS

    def __post_init__(self) -> None:
        object.__setattr__(self, "starts", parse_starts(self.starts))
        if self.iters < 1 or self.warmup < 0:
            raise ConfigError("--iters must be at least 1 and --warmup at least 0")
        if self.timeout_s <= 0:
            raise ConfigError("--timeout must be positive")
