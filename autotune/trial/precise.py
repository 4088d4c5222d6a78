"""The reference: the study's model and inputs run once in a higher precision, in a process of
its own; every trial judges its outputs against it (:mod:`autotune.trial.accuracy`).

The model is built exactly as a trial builds it (in the study's dtype, so its weights are the
study's rounded values), then converted parameter by parameter to float64 where that copy fits
in the memory at hand, else to float32. For a float32 study float32 is no higher precision:
then there is no reference, and the verdict says so. Gemma-2B at full depth in bfloat16 (5 GB)
gets a float32 reference (10 GB; float64 would be 20 GB, beyond a 24 GiB machine), which is
still five orders of magnitude more precise than bfloat16.

What is kept, by workload:
- inference: every output tensor of one forward (over a traffic, a sample of each at every
  shape a trial may judge: :func:`autotune.traffic.reference_shapes`);
- train: for each of two SGD steps (a CUDA-graph strategy is judged on its second), the loss
  and a strided sample of every gradient (:func:`autotune.trial.accuracy.sample`);
- generate: the prefill's last logits, its token, and the first decode step's logits.

The data is written with ``torch.save`` and read with ``weights_only=True``
(:func:`autotune.trial.accuracy.load_reference`): tensors, numbers and text, never code.
"""

from __future__ import annotations

from typing import Any

from autotune import catalog, device
from autotune.catalog import ModelRef
from autotune.trial import accuracy
from autotune.trial.scenarios import steps
from autotune.trial.scenarios.generate import Generation, new_cache
from autotune.workload import Workload

HEADROOM = 0.75  # the reference's copy may take this share of the memory left after the build
NEED = {"inference": 1.2, "generate": 1.3, "train": 3.2}  # x the parameters' bytes (+ grads)
BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}


def precision_for(parameters: int, study_dtype: str, kind: str, available: int) -> tuple[str, str]:
    """The reference dtype for a model of ``parameters`` elements (``""`` when none fits or none
    is more precise than the study's), and why not."""
    higher = [d for d in ("float64", "float32") if BYTES[d] > BYTES[study_dtype]]
    for dtype in higher:
        if parameters * BYTES[dtype] * NEED[kind] <= HEADROOM * available:
            return dtype, ""
    need = parameters * BYTES[higher[-1]] * NEED[kind] / 2**30
    return "", (f"no reference: a {higher[-1]} copy would need {need:.1f} GiB, over "
                f"{HEADROOM:.0%} of the {available / 2**30:.1f} GiB at hand")  # fmt: skip


def _upcast(value: Any, dtype: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, (tuple, list)):
        return type(value)(_upcast(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _upcast(v, dtype) for k, v in value.items()}
    return value


def compute(ref: ModelRef, workload: Workload, seed: int = 0) -> dict[str, Any]:
    """Build, upcast, run: the reference data (``dtype`` "" when there is none, with why)."""
    import torch

    torch.manual_seed(seed)
    model, inputs = catalog.build(ref, workload)
    parameters = sum(p.numel() for p in model.parameters())
    at_hand = device.available(workload.device)
    dtype, why = precision_for(parameters, workload.dtype, workload.kind, at_hand)
    data: dict[str, Any] = {"dtype": dtype, "reason": why, "kind": workload.kind, "outputs": {}}
    if not dtype:
        return data
    high = getattr(torch, dtype)
    model = model.to(high)  # parameter by parameter: the study's copy is freed as it goes
    inputs = _upcast(inputs, high)
    if workload.traffic:  # every shape a trial may judge (autotune.trial.scenarios.traffic_trial)
        from autotune.traffic import reference_shapes
        from autotune.trial.scenarios.judged import judged_outputs, reference_name

        for shape in reference_shapes(workload.traffic):
            at = _upcast(catalog.inputs_at(ref, model, workload, shape), high)
            with torch.no_grad():
                out = judged_outputs(model(*at, **steps.keywords_for(model, at)))
            data["outputs"][reference_name(shape)] = [t.cpu() for t in out]
    elif workload.kind == "inference":
        with torch.no_grad():
            out = accuracy.tensors(model(*inputs))
        data["outputs"]["forward"] = [t.detach().cpu() for t in out]
    elif workload.kind == "train":
        data["outputs"].update(train_steps(model, inputs, 2))
    else:
        data["outputs"].update(first_tokens(model, inputs[0], workload))
    return data


def train_steps(model: Any, inputs: tuple, count: int) -> dict[str, list[Any]]:
    """``count`` SGD steps as a trial runs them; after each, the loss and a sample of every
    gradient (``step1``, ``step2``, ...)."""
    step = steps.make_step(model, inputs, "train")
    found = {}
    for n in range(1, count + 1):
        loss = step()
        samples = [accuracy.sample(g).cpu() for g in steps.grads(model)]
        found[f"step{n}"] = [loss.detach().cpu(), *samples]
    return found


def first_tokens(model: Any, prompt: Any, workload: Workload) -> dict[str, list[Any]]:
    """The prefill's last logits, its greedy token, and the first decode step's logits."""
    gen = Generation(model, new_cache(model, workload), prompt, 2, workload.device)
    gen.prefill()
    prefill = gen.logits.detach().cpu().clone()
    token = gen.token.detach().cpu().clone()
    gen.decode()
    return {"prefill": [prefill], "token": [token], "decode": [gen.logits.detach().cpu().clone()]}
