"""What of a traffic shape's outputs is judged, and under which name the reference keeps it:
a fixed-stride sample of each output that meets every column."""

from __future__ import annotations

import math
from typing import Any

from autotune.trial import accuracy

Shape = tuple[int, int]
SAMPLE = 2**16  # elements of each output judged at a traffic's shape: the reference keeps them
# in float64 for every shape it covers (gemma's logits at 256 tokens are 65 M elements)


def judged_outputs(out: Any) -> list[Any]:
    """What is judged of one traffic shape's outputs: :data:`SAMPLE` elements of each tensor
    at a stride coprime with its last dimension, so that every column is met."""
    return [spread_sample(t, SAMPLE) for t in accuracy.tensors(out)]


def spread_sample(t: Any, size: int) -> Any:
    """At most ``size`` elements of ``t`` at a fixed stride coprime with its last dimension (a
    stride sharing a factor with a vocabulary of 256,000 would meet 256 of its columns)."""
    flat = t.detach().reshape(-1)
    last = t.shape[-1] if t.dim() else 1
    stride = max(1, flat.numel() // size)
    while stride > 1 and math.gcd(stride, last) != 1:
        stride += 1
    return flat[::stride][:size].clone()


def reference_name(shape: Shape) -> str:
    """The reference's outputs of one traffic shape."""
    return f"forward@{shape[0]}x{shape[1]}"
