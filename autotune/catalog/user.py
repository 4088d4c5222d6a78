"""Users' own models: ``package.module:function`` returning ``(model, example_inputs)``."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.workload import Workload

FORM = "package.module:function"


def resolve(name: str) -> Callable[[], Any]:
    """Import ``module:function`` (the current directory first on sys.path, like uvicorn)."""
    module_name, _, attr = name.partition(":")
    parts = module_name.split(".") + attr.split(".")
    if not all(part.isidentifier() for part in parts):
        raise ConfigError(f"bad model {name!r}: a function model is written {FORM}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name + ".").startswith(exc.name + "."):
            raise ConfigError(
                f"model {name!r}: no module named {module_name!r} in {cwd} or on sys.path"
            ) from exc
        raise ConfigError(f"model {name!r}: importing {module_name} failed: {_line(exc)}") from exc
    except Exception as exc:  # the user's module raised while importing
        raise ConfigError(f"model {name!r}: importing {module_name} failed: {_line(exc)}") from exc
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"model {name!r}: module {module_name} has no {attr!r}")
    if not callable(target):
        raise ConfigError(f"model {name!r}: {attr} in {module_name} is not callable")
    return target


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
            raise ConfigError(f"model {name!r} raised {_line(exc)}") from exc
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
    return model, tuple(_move(item, workload) for item in inputs)


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


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]
