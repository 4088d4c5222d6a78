"""The accuracy oracle: is a compiled output right?

Eager is not the truth. In bfloat16 the rounding that accumulates over many layers differs
between eager and a compiled graph, and a compiled output can be *closer* to the exact answer
than eager's. So each output is judged, as PyTorch's own harness judges it
(``torch._dynamo.utils.same`` with ``fp64_ref``), against a **reference**: the same model and
inputs run in a higher precision (float64 where it fits in memory, else float32; see
:mod:`autotune.trial.precise`). An output passes when its error against the reference is
at most ``k`` times eager's own error, plus a floor:

- ``RMSE(compiled, ref) <= k * RMSE(eager, ref) + 1 ulp * rms(ref)``, PyTorch's rule, and
- ``max|compiled - ref| <= k * max|eager - ref| + 16 ulp * rms(ref)``, so that one element that
  is badly wrong fails although the RMSE of millions of elements would hide it.

``k`` is PyTorch's multiplier: 3 for bfloat16 and float16 (its comment: AMP against float32
differs by less than 0.1 % end to end, and 2 gave false alarms), 2 for float32, and 3 for an
output of fewer than 1000 elements, where noise dominates. ``ulp`` is the study dtype's machine
epsilon. A float32 output must also pass today's element-wise check against eager
(:func:`against_eager`), so a float32 gate is never looser than it was. The user's
``tolerance`` scales ``k`` and every floor (2 = twice as lenient). Without a reference (it did
not fit in memory) the element-wise check against eager is the gate, and the verdict says so.

A float32 study whose matmuls run in TF32 (on a GPU, :func:`autotune.device.tf32_for`) is
judged at TF32's precision, ``tfloat32`` below: a 10-bit mantissa (eps 2**-10, float16's), with
float16's bounds against eager and its multiplier (Triton's TF32 dot rounds less accurately
than cuBLAS's, triton-lang/triton#4574, so a compiled GEMM's error may be a few times eager's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotune.trial.measurement import Accuracy

# (atol, rtol) per dtype for the element-wise check against eager: an element passes when
# |compiled - eager| <= atol + rtol * |eager| + ULPS * eps * rms(eager), as
# torch.testing.assert_close checks, plus the rounding noise of ULPS units in the last place at
# the output's typical magnitude (its RMS).
# Each table is keyed by the precision outputs are computed in: the study's dtype, or
# ``tfloat32`` for a float32 study with TF32 matmuls.
TOLERANCES = {"float32": (1e-4, 1e-3), "tfloat32": (1e-3, 1e-2), "float16": (1e-3, 1e-2),
              "bfloat16": (1e-2, 5e-2)}  # fmt: skip
ULPS = 16
MULTIPLIER = {"float32": 2.0, "tfloat32": 3.0, "float16": 3.0, "bfloat16": 3.0}
EPS = {"float32": 2.0**-23, "tfloat32": 2.0**-10, "float16": 2.0**-10, "bfloat16": 2.0**-7}
SMALL = 1000  # fewer elements than this: noise dominates, k is 3 (PyTorch's rule)
SAMPLE = 4096  # elements of each gradient that a train reference keeps (a fixed stride)


@dataclass(frozen=True)
class Gate:
    """The rule one study's outputs are judged by."""

    dtype: str
    tolerance: float = 1.0
    tf32: bool = False  # float32 matmuls run in TF32: judged at TF32's precision

    @property
    def precision(self) -> str:
        """What the outputs are computed in: the dtype, or ``tfloat32``."""
        return "tfloat32" if self.dtype == "float32" and self.tf32 else self.dtype

    @property
    def eps(self) -> float:
        return EPS[self.precision]

    def multiplier(self, numel: int) -> float:
        k = 3.0 if numel < SMALL else MULTIPLIER[self.precision]
        return k * self.tolerance

    def describe(self, reference: str) -> str:
        """The rule in words, as the measurement and ``best.json`` record it."""
        t = self.tolerance
        tf32 = " (TF32 matmuls)" if self.precision == "tfloat32" else ""
        if not reference:
            a, r = TOLERANCES[self.precision]
            return (f"no reference: element-wise against eager, atol {a * t:g}, rtol "
                    f"{r * t:g}{tf32}")  # fmt: skip
        k = MULTIPLIER[self.precision] * t
        return (f"against a {reference} reference: RMSE <= {k:g} x eager's + {t:g} ulp, largest "
                f"error <= {k:g} x eager's + {ULPS * t:g} ulp (ulp: {self.precision}'s at the "
                f"output's RMS){tf32}")  # fmt: skip


def tensors(obj: Any) -> list[Any]:
    """Every tensor in a model output (tensor, tuple, list, dict or ModelOutput), in order."""
    from collections.abc import Mapping

    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in tensors(item)]
    return []


def sample(t: Any, size: int = SAMPLE) -> Any:
    """At most ``size`` elements of a (large) tensor, at a fixed stride: what a train
    reference keeps of each gradient (a model's gradients in float64 do not fit anywhere), and
    a traffic's reference of each shape's outputs."""
    flat = t.detach().reshape(-1)
    stride = max(1, flat.numel() // size)
    return flat[::stride][:size].clone()


def against_eager(expected: list[Any], actual: list[Any], dtype: str,
                  tolerance: float = 1.0, tf32: bool = False) -> Accuracy:  # fmt: skip
    """Compiled against eager, element by element, under the bounds (x tolerance) of the dtype,
    or of TF32 for float32 with ``tf32`` matmuls."""
    precision = Gate(dtype, tolerance, tf32).precision
    atol, rtol = (v * tolerance for v in TOLERANCES[precision])
    eps = EPS[precision]
    if len(expected) != len(actual):
        return Accuracy(math.inf, math.inf, False, atol, rtol, "different number of outputs")
    worst_abs = worst_rel = 0.0
    bad = total = 0
    detail = ""
    for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
        if e.shape != a.shape:
            return Accuracy(math.inf, math.inf, False, atol, rtol, f"output {i}: shape differs")
        e, a = e.detach().float().cpu(), a.detach().float().cpu()
        same = (e == a) | (e.isnan() & a.isnan())  # equal infinities and NaNs agree
        diff = (e - a).abs().masked_fill(same, 0.0).nan_to_num(nan=math.inf)
        finite = e[e.isfinite()]
        scale = float(finite.abs().max()) if finite.numel() else 0.0
        rms = float(finite.pow(2).mean().sqrt()) if finite.numel() else 0.0
        bound = atol + tolerance * ULPS * eps * rms + rtol * e.abs().nan_to_num(0, 0, 0)
        out = diff > bound
        err = float(diff.max()) if diff.numel() else 0.0
        worst_abs = max(worst_abs, err)
        worst_rel = max(worst_rel, err / scale if scale > 0 else (0.0 if err == 0 else math.inf))
        n = int(out.sum())
        if n and not detail:
            j = int(out.flatten().nonzero()[0])
            got, want = float(a.flatten()[j]), float(e.flatten()[j])
            detail = (f"output {i}: {n} of {out.numel()} elements out of tolerance, e.g. "
                      f"{got:.4g} vs eager {want:.4g}")  # fmt: skip
        bad, total = bad + n, total + out.numel()
    fraction = bad / total if total else 0.0
    return Accuracy(worst_abs, worst_rel, bad == 0, atol, rtol, detail, fraction,
                    tolerance=tolerance)  # fmt: skip


def judge(expected: list[Any], actual: list[Any], reference: list[Any] | None, dtype: str,
          tolerance: float = 1.0, reference_dtype: str = "",
          tf32: bool = False) -> Accuracy:  # fmt: skip
    """The verdict on compiled outputs ``actual``, given eager's ``expected`` and the
    higher-precision ``reference`` (None: judged against eager alone); ``tf32``: a float32
    study's matmuls ran in TF32, judged at TF32's precision."""
    gate = Gate(dtype, tolerance, tf32)
    eager_check = against_eager(expected, actual, dtype, tolerance, tf32)
    if reference is None:
        eager_check.rule = gate.describe("")
        return eager_check
    result = Accuracy(eager_check.max_abs, eager_check.max_rel, True, eager_check.atol,
                      eager_check.rtol, "", eager_check.mismatched, reference=reference_dtype,
                      tolerance=tolerance, rule=gate.describe(reference_dtype))  # fmt: skip
    if not len(reference) == len(expected) == len(actual):
        result.passed, result.detail = False, "different number of outputs than the reference"
        return result
    for i, (e, a, r) in enumerate(zip(expected, actual, reference, strict=True)):
        verdict = _against_reference(i, e, a, r, gate)
        result.eager_rmse = max(result.eager_rmse or 0.0, verdict["eager_rmse"])
        result.compiled_rmse = max(result.compiled_rmse or 0.0, verdict["compiled_rmse"])
        result.eager_max = max(result.eager_max or 0.0, verdict["eager_max"])
        result.compiled_max = max(result.compiled_max or 0.0, verdict["compiled_max"])
        if verdict["detail"] and result.passed:
            result.passed, result.detail = False, verdict["detail"]
    if dtype == "float32" and not eager_check.passed and result.passed:  # never looser
        result.passed, result.detail = False, f"{eager_check.detail} (float32: eager's check)"
    return result


def _against_reference(i: int, e: Any, a: Any, r: Any, gate: Gate) -> dict[str, Any]:
    """One output's errors against the reference, and why it fails ("" if it passes)."""
    import torch

    e, a = e.detach().cpu().double(), a.detach().cpu().double()
    r = r.detach().cpu().double()
    found = {"eager_rmse": 0.0, "compiled_rmse": 0.0, "eager_max": 0.0, "compiled_max": 0.0,
             "detail": ""}  # fmt: skip
    if not (e.shape == a.shape == r.shape):
        found["detail"] = f"output {i}: shape {tuple(a.shape)}, reference {tuple(r.shape)}"
        return found
    finite = r.isfinite()
    if not bool(finite.all()):  # where the reference is not finite, compiled must match eager
        same = (e == a) | (e.isnan() & a.isnan())
        if not bool(same[~finite].all()):
            found["detail"] = f"output {i}: differs from eager where the reference is not finite"
            return found
    e, a, r = e[finite], a[finite], r[finite]
    if r.numel() == 0:
        return found
    de, da = (e - r).abs().nan_to_num(nan=math.inf), (a - r).abs().nan_to_num(nan=math.inf)
    rms = float(r.pow(2).mean().sqrt())
    rmse_e, rmse_a = float(de.pow(2).mean().sqrt()), float(da.pow(2).mean().sqrt())
    max_e, max_a = float(de.max()), float(da.max())
    k = gate.multiplier(r.numel())
    ulp = gate.eps * rms * gate.tolerance
    found.update(eager_rmse=rmse_e, compiled_rmse=rmse_a, eager_max=max_e, compiled_max=max_a)
    if not rmse_a <= k * rmse_e + ulp:
        found["detail"] = (f"output {i}: RMSE {rmse_a:.3g} against the reference, eager's "
                           f"{rmse_e:.3g} (bound {k * rmse_e + ulp:.3g})")  # fmt: skip
    elif not max_a <= k * max_e + ULPS * ulp:
        j = int(torch.argmax(da))
        found["detail"] = (f"output {i}: an element off by {max_a:.3g} from the reference "
                           f"({float(a[j]):.4g} vs {float(r[j]):.4g}; eager's worst "
                           f"{max_e:.3g}, bound {k * max_e + ULPS * ulp:.3g})")  # fmt: skip
    return found


def load_reference(path: str) -> dict[str, Any]:
    """A reference file (:mod:`autotune.trial.precise`): tensors, numbers and text only
    (``weights_only``: nothing in it can run code)."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def save_reference(path: str, data: dict[str, Any]) -> None:
    import torch

    torch.save(data, path)
