"""The accuracy oracle: outputs judged against a higher-precision reference, relative to eager's
own error; each gate from both sides."""

from __future__ import annotations

import pytest
import torch

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial import accuracy
from autotune.trial.parent import run_trial
from autotune.trial.precise import precision_for
from autotune.trial.reference import make
from autotune.trial.scenarios.generate import check_tokens
from autotune.workload import Settings, Workload

BF16 = Workload(device="cpu", dtype="bfloat16")
QUICK = Settings(iters=3, warmup=1, timeout_s=300, starts=("cold",))
DEEP = ModelRef("tests.models:deep_stack")


def _outputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A float64 reference and eager's bfloat16 rounding of it, plus some noise."""
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(64, 256, generator=g, dtype=torch.float64)
    eager = (ref + 0.01 * torch.randn(64, 256, generator=g, dtype=torch.float64)).bfloat16()
    return ref, eager


def test_closer_to_the_reference_than_eager_passes_where_the_eager_check_fails() -> None:
    ref, eager = _outputs()
    compiled = ref.bfloat16()  # the exact answer, rounded once: far from eager, close to truth
    assert not accuracy.against_eager([eager], [compiled], "bfloat16", 0.1).passed
    verdict = accuracy.judge([eager], [compiled], [ref], "bfloat16", 0.1, "float64")
    assert verdict.passed and verdict.compiled_rmse < verdict.eager_rmse, verdict.detail
    assert verdict.reference == "float64" and "reference" in verdict.rule


@pytest.mark.parametrize(
    "wrong",
    [
        lambda t: (
            t.flatten()
            .index_put(
                (t.flatten().abs().argmin(),), torch.tensor(2.0).to(t.dtype), accumulate=True
            )
            .view_as(t)
        ),  # one small element off by 2
        lambda t: t.roll(1),  # every value in the wrong place
        lambda t: t.t().reshape(t.shape),  # transposed
        lambda t: t * 1.05,  # a scale error of 5 %
    ],
    ids=["one-element", "shift", "transpose", "scale"],
)
def test_wrong_outputs_fail_against_the_reference(wrong) -> None:  # type: ignore[no-untyped-def]
    ref, eager = _outputs()
    verdict = accuracy.judge([eager], [wrong(eager)], [ref], "bfloat16", 1.0, "float64")
    assert not verdict.passed and "output 0" in verdict.detail
    assert accuracy.judge([eager], [eager.clone()], [ref], "bfloat16", 1.0, "float64").passed


def test_a_float32_gate_is_never_looser_than_the_eager_check() -> None:
    ref = torch.randn(32, 32, dtype=torch.float64)
    eager = ref.float()
    nudged = eager.clone()
    nudged[3, 4] += 0.05
    for compiled, ok in ((eager.clone(), True), (nudged, False)):
        old = accuracy.against_eager([eager], [compiled], "float32")
        new = accuracy.judge([eager], [compiled], [ref], "float32", 1.0, "float64")
        assert old.passed == new.passed == ok
    noisy = eager + 1e-7 * torch.randn(32, 32)  # about one unit in the last place
    assert accuracy.judge([eager], [noisy], [ref], "float32", 1.0, "float64").passed
    strict = accuracy.judge([eager], [noisy], [ref], "float32", 0.1, "float64")
    assert not strict.passed and strict.tolerance == 0.1  # the user's tolerance tightens it


def test_a_tf32_level_error_passes_with_tf32_matmuls_and_fails_without() -> None:
    """Float32 studies on a GPU run their matmuls in TF32 (a 10-bit mantissa), and Triton's TF32
    dot is less accurate than cuBLAS's: judged at float32's precision, a compiled GEMM's
    TF32-level error is a wrong answer; at TF32's, it passes."""
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(64, 256, generator=g, dtype=torch.float64)

    def rounded(bits: int) -> torch.Tensor:  # a relative error of about 2**-bits per element
        return (ref * (1 + 2.0**-bits * torch.randn(64, 256, generator=g))).float()

    eager, compiled = rounded(12), rounded(10)  # cuBLAS's TF32, then a worse TF32 dot
    on = accuracy.judge([eager], [compiled], [ref], "float32", 1.0, "float64", tf32=True)
    off = accuracy.judge([eager], [compiled], [ref], "float32", 1.0, "float64", tf32=False)
    assert on.passed, on.detail
    assert not off.passed and "TF32" in on.rule and "TF32" not in off.rule
    without = [accuracy.judge([eager], [compiled], None, "float32", tf32=t) for t in (True, False)]
    assert [v.passed for v in without] == [True, False]  # no reference: eager's check alone
    assert not accuracy.judge([eager], [compiled * 1.05], [ref], "float32", tf32=True).passed
    assert accuracy.Gate("bfloat16", tf32=True).eps == accuracy.Gate("bfloat16").eps


def test_a_trial_judges_at_tf32_where_its_float32_matmuls_run_in_tf32() -> None:
    from autotune import device
    from autotune.trial.measurement import Measurement
    from autotune.trial.request import Request
    from autotune.trial.scenarios.base import TrialContext

    def gate(dtype: str, where: str) -> accuracy.Gate:
        w = Workload(device=where, dtype=dtype)
        request = Request("trial", Strategy.create("full"), DEEP, w)
        m = Measurement(*request.base(), "ok")
        ctx = TrialContext(request, request.strategy, w, DEEP, m, device.PeakMemory("cpu"))
        return ctx.gate

    precision = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")  # what device.tf32_for sets on a GPU
        assert gate("float32", "cuda:0").precision == "tfloat32"
        assert gate("float32", "cpu").precision == "float32"
        assert gate("bfloat16", "cuda:0").precision == "bfloat16"
        torch.set_float32_matmul_precision("highest")
        assert gate("float32", "cuda:0").precision == "float32"
    finally:
        torch.set_float32_matmul_precision(precision)


def test_the_reference_is_float64_where_it_fits_else_float32_else_none() -> None:
    gib = 2**30
    assert precision_for(10**6, "bfloat16", "inference", 16 * gib) == ("float64", "")
    gemma = 2_506_172_416  # Gemma-2B's parameters: float64 needs 22 GiB, float32 11 GiB
    assert precision_for(gemma, "bfloat16", "inference", 60 * gib)[0] == "float64"
    # this machine: 24 GiB, about 17 free once the bfloat16 model (5 GB) is built
    assert precision_for(gemma, "bfloat16", "inference", 17 * gib)[0] == "float32"
    assert precision_for(gemma, "bfloat16", "inference", 8 * gib)[0] == ""
    dtype, why = precision_for(gemma, "float32", "inference", 17 * gib)
    assert dtype == "" and "float64 copy would need" in why  # float32 is no higher for float32


def test_near_ties_pass_and_real_wrong_tokens_fail() -> None:
    eager = torch.tensor([[5, 7, 9, 11]])
    parted = torch.tensor([[5, 7, 8, 3]])  # differs from token 3 on
    tie = check_tokens(eager, parted, margins=[2.0, 1.5, 0.02, 3.0], tie=0.05)
    assert tie.passed and tie.near_tie and tie.matched == 2 and "near tie" in tie.detail
    wrong = check_tokens(eager, parted, margins=[2.0, 1.5, 0.4, 3.0], tie=0.05)
    assert not wrong.passed and "token 3 of 4 differs" in wrong.detail
    assert not check_tokens(eager, parted).passed  # no reference: every token must match
    assert check_tokens(eager, eager.clone()).passed


def test_references_are_read_without_running_code(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pickle

    class Boom:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (print, ("this ran",))

    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"dtype": Boom()}, protocol=2))  # torch.save's protocol
    with pytest.raises(pickle.UnpicklingError):
        accuracy.load_reference(str(path))


@pytest.mark.slow
def test_a_deep_bf16_inductor_compile_fails_the_eager_check_and_passes_the_reference() -> None:
    """160 residual blocks in bfloat16: Inductor fuses each block's norm and GELU, so its
    rounding differs from eager's. The element-wise check against eager fails hundreds of
    elements; against a float64 reference the compiled output is no worse than eager's."""
    reference = make(DEEP, BF16, QUICK)
    assert reference.dtype == "float64" and reference.path
    m = run_trial(DEEP, BF16, Strategy.create("regional", "inductor"), QUICK, reference)
    assert m.status == "ok", m.reason + m.log_tail
    a = m.accuracy
    assert a is not None and a.passed and m.feasible, a.detail if a else m.reason
    assert a.mismatched > 0.001  # today's gate would have called it wrong
    assert a.compiled_rmse is not None and a.eager_rmse is not None
    assert a.compiled_rmse <= a.eager_rmse * 1.5
    wrong = run_trial(DEEP, BF16, Strategy.create("full", "tests.models:shift_backend"), QUICK,
                    reference)  # fmt: skip
    assert wrong.status == "ok" and not wrong.feasible and "RMSE" in wrong.accuracy.detail


def test_train_compares_the_same_optimizer_step() -> None:
    """A CUDA-graph strategy's compiled step is its second call (the first records the
    graphs): eager must take two steps too, and the reference's second step is the truth."""
    from autotune.trial.request import Request
    from autotune.trial.scenarios import Train, begin

    spec = {"kind": "trial", "strategy": Strategy.create("full", "aot_eager").to_dict(),
            "model": ModelRef("toy-64", layers=4).to_dict(),
            "workload": Workload(device="cpu", kind="train").to_dict(),
            "iters": 1, "warmup": 0, "seed": 0}  # fmt: skip
    ref = make(ModelRef("toy-64", layers=4), Workload(device="cpu", kind="train"))
    assert ref.dtype == "float64"
    spec.update(reference=ref.path, reference_dtype=ref.dtype)
    trial = Train(begin(Request.from_dict(spec)))
    trial.setup()
    trial.graphs = True  # what a CUDA-graph strategy sets: its first call records, then replays
    trial.first()
    a = trial.ctx.result.accuracy
    assert a is not None and a.passed and a.reference == "float64", a.detail
    after = zip(trial.eager_model.parameters(), trial.model.parameters(), strict=True)
    assert all(torch.equal(e, c) for e, c in after)  # both sides took the same two steps
    data = accuracy.load_reference(ref.path)
    step1, step2 = data["outputs"]["step1"], data["outputs"]["step2"]
    assert not torch.equal(step1[0], step2[0])  # the steps differ: comparing across them fails
    mixed = accuracy.judge(step2, step1, step2, "float32", 1.0, "float64")
    assert not mixed.passed  # a first step judged by the second step's reference is "wrong"
