"""Users' own models: ``package.module:function`` returning ``(model, example_inputs)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune import usercode
from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.workload import Workload


def resolve(name: str) -> Callable[[], Any]:
    """Import ``module:function`` (the current directory first on sys.path, like uvicorn)."""
    return usercode.resolve(name, "model")


def build_user(name: str, seed: int, workload: Workload) -> tuple[Any, tuple[Any, ...]]:
    """Call the user's function under ``torch.manual_seed(seed)``; move model and inputs.

    The model is moved like ``nn.Module.to(device, dtype)``: floating parameters and buffers take
    the workload's dtype, integer ones keep theirs. Floating input tensors take the dtype too.
    """
    import torch

    function = resolve(name)
    devices = [torch.device(workload.device).index or 0] if workload.is_cuda else []
    with torch.random.fork_rng(devices=devices, device_type="cuda"):
        torch.manual_seed(seed)
        try:
            result = function()
        except Exception as exc:
            raise ConfigError(f"model {name!r} raised {usercode.line(exc)}") from exc
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ConfigError(
            f"model {name!r} must return (model, example_inputs), got {type(result).__name__}"
        )
    model, inputs = result
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(
            f"model {name!r} returned a {type(model).__name__}, not a torch.nn.Module"
        )
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)):
        raise ConfigError(
            f"model {name!r}: example_inputs must be a tensor or a tuple, "
            f"got {type(inputs).__name__}"
        )
    model = model.to(device=workload.device, dtype=workload.torch_dtype).eval()
    return model, move(inputs, workload)


def move(inputs: tuple[Any, ...], workload: Workload) -> tuple[Any, ...]:
    """Inputs on the workload's device; floating tensors in its dtype."""
    return tuple(_move(item, workload) for item in inputs)


def _move(value: Any, workload: Workload) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return value.to(device=workload.device, dtype=workload.torch_dtype)
        return value.to(device=workload.device)
    if isinstance(value, (tuple, list)):
        return type(value)(_move(item, workload) for item in value)
    if isinstance(value, dict):
        return {key: _move(item, workload) for key, item in value.items()}
    return value
