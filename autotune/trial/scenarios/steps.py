"""The calls a trial times: a no-grad forward, or a train step (forward, backward, SGD)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.trial.accuracy import tensors


def loss(output: Any) -> Any:
    """A train step's loss: the mean square of the first output, in at least float32."""
    import torch

    first = tensors(output)[0]
    wide = first if first.dtype == torch.float64 else first.float()
    return wide.pow(2).mean()


def make_step(
    model: Any, inputs: tuple, kind: str, keywords: dict[str, Any] | None = None
) -> Callable[[], Any]:
    """One call of the workload: a no-grad forward, or forward + backward + optimizer step;
    ``keywords`` go with the inputs (a traffic's ``attention_mask``). (A CUDA-graph strategy's
    compiled model marks each call's step itself: autotune.strategy.granularity.)"""
    import torch

    given = keywords or {}
    if kind == "inference":

        def forward() -> Any:
            with torch.no_grad():
                return model(*inputs, **given)

        return forward
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def train_step() -> Any:
        optimizer.zero_grad(set_to_none=True)
        value = loss(model(*inputs, **given))
        value.backward()
        optimizer.step()
        return value.detach()

    return train_step


def keywords_for(model: Any, inputs: tuple) -> dict[str, Any]:
    """What a user passes beside token ids: an all-ones ``attention_mask`` where the model's
    forward takes one (so a trial calls the model as transformers' users and pipelines do,
    and marks and buckets are measured with the mask they will meet); none otherwise."""
    import inspect

    import torch

    ids = inputs[0] if inputs else None
    try:
        takes = "attention_mask" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes or not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        return {}
    return {"attention_mask": torch.ones_like(ids)}


def grads(model: Any) -> list[Any]:
    """Every gradient the last backward left, in parameter order."""
    return [p.grad for p in model.parameters() if p.grad is not None]
