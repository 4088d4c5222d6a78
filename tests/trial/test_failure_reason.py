"""A failure Dynamo met while tracing names its place before anything is cut: the innermost
frame where it arose and the line of the user code Dynamo was tracing, kept whole when a table
or a summary shortens the reason (Dynamo's own listing of that code is cut first)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

from autotune.cli import main
from autotune.errors import shorten, where
from autotune.trial.child import describe


class TracedOnly(torch.nn.Module):
    """Runs in eager; fails inside Dynamo while tracing (a size past the tensor's dimensions,
    as gpt2 under ``marks=seq-unbacked/stance=eager_then_compile`` failed inside Dynamo)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if torch.compiler.is_compiling():
            return y + x.size(5)
        return y


def traced_only() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return TracedOnly(), (torch.randn(4, 8),)


class Breaks(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return x + 1


def _line(cls: type, text: str) -> int:
    """The line of ``cls`` whose source holds ``text``."""
    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if text in line)


TRACED = (
    f"user code tests/trial/test_failure_reason.py:{_line(TracedOnly, 'x.size(5)')} in forward"
)
BREAK = f"user code tests/trial/test_failure_reason.py:{_line(Breaks, 'graph_break()')} in forward"


def _failure(module: torch.nn.Module, **options: object) -> BaseException:
    torch._dynamo.reset()
    try:
        with pytest.raises(Exception) as failed:
            torch.compile(module, backend="eager", **options)(torch.randn(4, 8))
    finally:
        torch._dynamo.reset()
    return failed.value


def test_a_failure_inside_dynamo_names_its_innermost_frame_and_the_user_code() -> None:
    exc = _failure(TracedOnly())
    assert isinstance(exc, IndexError)
    reason = describe(exc)
    assert reason.startswith("IndexError: tuple index out of range")
    place = where(exc)
    assert place.startswith("torch/_dynamo/variables/") and " in _method_size_stride" in place
    assert place.endswith(TRACED)
    for limit in (400, 160):  # a trial's summary, and autotune show's table
        short = shorten(reason, limit)
        assert len(short) <= limit and "in _method_size_stride" in short
        assert TRACED in short or TRACED.replace("tests/trial/", "") in short  # by its file
        assert short.startswith("IndexError: tuple index out of range")
    short = shorten(reason, 140)  # too short for the whole place: named by its files
    assert short.startswith("IndexError: tuple index out of range… (at tensor.py:")
    assert short.endswith("in _method_size_stride; user code test_failure_reason.py:"
                          f"{TRACED.split(':')[1]})")  # fmt: skip


def test_a_graph_break_under_fullgraph_names_the_user_code_that_broke() -> None:
    exc = _failure(Breaks(), fullgraph=True)
    assert type(exc).__name__ == "Unsupported"
    short = shorten(describe(exc), 200)
    assert short.startswith("Unsupported: Call to `torch._dynamo.graph_break()`")
    assert short.endswith(f"{BREAK})") and len(short) <= 200


def _boom() -> None:
    raise ValueError("boom")


def test_a_plain_short_reason_is_unchanged_and_a_long_one_keeps_its_place() -> None:
    with pytest.raises(ValueError) as failed:
        _boom()
    reason = describe(failed.value)
    raised = inspect.getsourcelines(_boom)[1] + 1
    here = "tests/trial/test_failure_reason.py"
    assert reason.startswith(f"ValueError: boom (at {here}:{raised} in _boom; {here}:")
    assert "user code" not in reason and shorten(reason, 300) == reason
    long = "RuntimeError: " + "the backend refused " * 20 + "(at tests/models.py:12 in fn)"
    short = shorten(long, 100)
    assert len(short) <= 100 and short.endswith("… (at tests/models.py:12 in fn)")
    assert long.startswith(short.split("…")[0] + " ")  # cut between two words
    assert shorten(long, 40) == "RuntimeError: the backend refused the…"  # no room: as before
    plain = "RuntimeError: " + "the backend refused " * 20
    assert shorten(plain, 60) == "RuntimeError: the backend refused the backend refused the…"


def test_a_wrapped_error_names_the_user_code_from_its_text_past_torch_s_own_modules() -> None:
    listing = ("IndexError: tuple index out of range\n\nfrom user code:\n"
               '  File "/srv/app/model.py", line 276, in forward\n    h = self.ln_1(h)\n'
               f'  File "{torch.nn.modules.normalization.__file__}", line 228, in forward\n'
               "    return F.layer_norm(\n")  # fmt: skip
    with pytest.raises(RuntimeError) as failed:
        raise RuntimeError(listing)  # InternalTorchDynamoError keeps only the text
    assert where(failed.value).endswith("; user code /srv/app/model.py:276 in forward")


def test_a_study_shows_a_dynamo_failure_with_its_place(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["search", "--model", "tests.trial.test_failure_reason:traced_only", "--backend",
            "eager", "--granularity", "none,full", "--trials", "2", "--iters", "3", "--warmup",
            "1", "--starts", "cold", "--no-progress", "--no-confirm", "--study", "traced",
            "--dynamic", "none", "--fullgraph", "false"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["show", "--study", "traced"]) == 0
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if line.startswith("full/eager")]
    assert "IndexError: tuple index out of range" in row
    assert TRACED in row or TRACED.replace("tests/trial/", "") in row  # the file, if need be
    [left] = [line for line in out.splitlines() if line.startswith("left out:")]
    assert "failed: IndexError: tuple index out of range" in left and "in forward)" in left
