from __future__ import annotations

import pytest
import torch
from accelerate.utils import compile_regions
from torch._dynamo.testing import CompileCounterWithBackend

from autotune.catalog.toy import Layer, Toy
from autotune.errors import NotApplicable
from autotune.strategy import Strategy
from autotune.strategy.granularity import apply, count_regions
from tests.models import IntAttrs


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


def _toy(n: int = 8) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Toy(n), torch.randn(10, 10)


@pytest.mark.parametrize("model_fn", [lambda: _toy()[0], lambda: IntAttrs(3)])
def test_regional_matches_accelerate_compile_regions(model_fn) -> None:
    model = model_fn()
    x = torch.randn(10, 10)
    ours = apply(model, Strategy.create("regional", "aot_eager"))
    theirs = compile_regions(model, backend="aot_eager")
    assert count_regions(ours) == count_regions(theirs) > 1
    # same structure: the same module paths are compiled
    compiled_paths = lambda m: sorted(  # noqa: E731
        n for n, s in m.named_modules() if isinstance(s, torch._dynamo.eval_frame.OptimizedModule)
    )
    assert compiled_paths(ours) == compiled_paths(theirs)
    with torch.no_grad():
        assert torch.equal(ours(x), theirs(x))
        torch.testing.assert_close(ours(x), model(x))
    # the user's model is untouched: no compiled module was put inside it
    assert count_regions(model) == 0


def test_toy_64_regional_has_65_regions_like_accelerate() -> None:
    model, _ = _toy(64)
    assert count_regions(apply(model, Strategy.create("regional", "eager"))) == 65
    assert count_regions(compile_regions(model, backend="eager")) == 65


def test_nested_marks_blocks_without_patching_the_user_class() -> None:
    model, x = _toy(4)
    forward_before = Layer.forward
    counter = CompileCounterWithBackend("eager")
    strategy = Strategy.create("nested", "eager")
    compiled = torch.compile(
        apply(model, strategy)._orig_mod, backend=counter
    )  # count graphs with a counting backend on the same rebuilt tree
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    ops = [n.target for g in counter.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("invoke_subgraph" in str(op).lower() for op in ops)
    # nothing patched behind it
    assert Layer.forward is forward_before
    assert "forward" not in vars(Layer) or vars(Layer)["forward"] is forward_before
    assert all("forward" not in vars(block) for block in model.layers)
    # and nothing leaks into a later plain compile of the same model
    torch._dynamo.reset()
    later = CompileCounterWithBackend("eager")
    with torch.no_grad():
        torch.compile(model, backend=later)(x)
    ops = [n.target for g in later.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert not any("invoke_subgraph" in str(op).lower() for op in ops)


@pytest.mark.parametrize("granularity", ["regional", "nested"])
def test_no_repeated_blocks_is_not_applicable_not_full(granularity: str) -> None:
    flat = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    with pytest.raises(NotApplicable, match="needs repeated blocks"):
        apply(flat, Strategy.create(granularity, "eager"))


def test_none_and_full() -> None:
    model, x = _toy(2)
    assert apply(model, Strategy.create("none")) is model
    full = apply(model, Strategy.create("full", "aot_eager"))
    assert count_regions(full) == 1
    with torch.no_grad():
        torch.testing.assert_close(full(x), model(x))


def _on_a_gpu(model: torch.nn.Module) -> torch.nn.Module:
    """The model with its parameters on ``cuda:0`` as torch's fake tensors (no CUDA needed): the
    CUDA-graph step mark is registered for a model on a CUDA device."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        for module in model.modules():
            for name, p in list(module._parameters.items()):
                fake = torch.empty(p.shape, device="cuda:0")
                module._parameters[name] = torch.nn.Parameter(fake)
    return model


@pytest.mark.parametrize("granularity", ["full", "regional", "nested"])
def test_the_step_mark_lands_on_the_compiled_model_never_on_the_user_s(granularity: str) -> None:
    """A regional compile's top is a shallow copy of the user's model: sharing its hook
    dictionaries put the CUDA-graph step mark on the user's model too (then traced by any
    later compile of it). The copy's hooks are its own, the user's own hook still runs on it."""
    import autotune

    model = _on_a_gpu(Toy(3))
    mine = model.register_forward_pre_hook(lambda *_: None)
    compiled = autotune.apply(model, Strategy.create(granularity, "inductor", "reduce-overhead"))
    assert list(model._forward_pre_hooks) == [mine.id]  # nothing new on the user's model
    marks = [k for k in compiled._forward_pre_hooks if k != mine.id]
    assert len(marks) == 1  # the mark is there, on the compiled model
    if granularity == "regional":
        assert mine.id in compiled._forward_pre_hooks  # the user's hook runs on the copy too
