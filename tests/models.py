"""Deliberately awkward models and a wrong backend, loaded by the child as ``tests.models:fn``."""

from __future__ import annotations

import os
import time

import torch

from autotune.catalog.toy import Layer, Toy


def tiny_toy() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Toy(4), (torch.randn(10, 10),)


class Aborts(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os.abort()


def aborting() -> tuple[torch.nn.Module, tuple]:
    return Aborts(), (torch.randn(2, 2),)


class Sleeps(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(3600)
        return x


def sleeping() -> tuple[torch.nn.Module, tuple]:
    return Sleeps(), (torch.randn(2, 2),)


class Breaks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        torch._dynamo.graph_break()
        return self.b(x)


def graph_break() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Breaks(), (torch.randn(3, 4),)


class Scaled(Layer):
    """A block that reads a per-layer Python int: dynamo specialises on it, once per layer."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * (self.index + 1) / (self.index + 1)


class IntAttrs(torch.nn.Module):
    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Scaled(i) for i in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def int_attrs() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return IntAttrs(4), (torch.randn(10, 10),)


def flat() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), (torch.randn(2, 4),)


def wrong_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A custom backend that compiles to the wrong answer: every output is off by one."""

    def run(*args: object) -> object:
        out = gm(*args)
        return type(out)(t + 1 if isinstance(t, torch.Tensor) else t for t in out)

    return run


def slow_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A backend that never finishes compiling (for interrupt and timeout tests)."""
    time.sleep(3600)
    return gm


def stalling_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A backend whose compile takes ``$TEST_COMPILE_STALL_S`` seconds (an hour unless set):
    a compile far dearer than any prior, as Inductor's can be after an upgrade."""
    time.sleep(float(os.environ.get("TEST_COMPILE_STALL_S", "3600")))
    return gm


def int_attrs_16() -> tuple[torch.nn.Module, tuple]:
    """16 blocks, each with its own int attribute: past dynamo's recompile limit (8)."""
    torch.manual_seed(0)
    return IntAttrs(16), (torch.randn(10, 10),)


TINY_LLAMA = {
    "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
}  # fmt: skip


def tiny_llama() -> tuple[torch.nn.Module, tuple]:
    """A 2-layer Llama small enough to generate in a test; declares --workload generate."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**TINY_LLAMA)
    config._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(config).eval()
    return model, (torch.randint(0, TINY_LLAMA["vocab_size"], (2, 8)),)


tiny_llama.supports_generate = True  # type: ignore[attr-defined]
tiny_llama.make_inputs = lambda batch, seq: (  # type: ignore[attr-defined]  # for a traffic
    torch.randint(0, TINY_LLAMA["vocab_size"], (batch, seq)),
)


def tiny_llama_eos() -> tuple[torch.nn.Module, tuple]:
    """The tiny Llama whose answers end, as a chat model's do: every eighth token id is an
    end-of-sequence token of its generation config, so a greedy answer stops after a few."""
    model, inputs = tiny_llama()
    model.generation_config.eos_token_id = list(range(0, TINY_LLAMA["vocab_size"], 8))
    return model, inputs


tiny_llama_eos.supports_generate = True  # type: ignore[attr-defined]
tiny_llama_eos.make_inputs = tiny_llama.make_inputs  # type: ignore[attr-defined]


def _sliding(kind: str) -> torch.nn.Module:
    """A 2-layer model of transformers' ``kind`` with the tiny Llama's sizes and a sliding
    window of 8 tokens (Gemma-2's on every other layer, with its soft-capping)."""
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, f"{kind}Config")(**TINY_LLAMA, sliding_window=8, head_dim=16)
    config._attn_implementation = "eager" if kind == "Gemma2" else "sdpa"  # Gemma-2: no sdpa
    return getattr(transformers, f"{kind}ForCausalLM")(config).eval()


def tiny_gemma2() -> tuple[torch.nn.Module, tuple]:
    """A 2-layer Gemma-2 (a sliding window of 8 on one layer, soft-capped logits)."""
    return _sliding("Gemma2"), (torch.randint(0, TINY_LLAMA["vocab_size"], (2, 8)),)


def tiny_mistral() -> tuple[torch.nn.Module, tuple]:
    """A 2-layer Mistral (a sliding window of 8 on every layer)."""
    return _sliding("Mistral"), (torch.randint(0, TINY_LLAMA["vocab_size"], (2, 8)),)


for _tiny in (tiny_gemma2, tiny_mistral):
    _tiny.supports_generate = True  # type: ignore[attr-defined]
    _tiny.make_inputs = tiny_llama.make_inputs  # type: ignore[attr-defined]


def decode_perturbing_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A backend right for the prefill and wrong for decode: it negates a decode step's logits."""
    decode = any(
        isinstance(t, torch.Tensor) and not t.is_floating_point() and t.dim() == 2
        and t.shape[-1] == 1 for t in example_inputs
    )  # fmt: skip

    def run(*args: object) -> object:
        out = gm(*args)
        if not decode:
            return out
        return type(out)(
            -t if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() == 3 else t
            for t in out
        )

    return run


def nudge_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A backend off in one small element only: the output's smallest value moves by 0.05,
    well within 5 % of the output's largest value, far outside its own tolerance."""

    def run(*args: object) -> object:
        out = gm(*args)
        first = out[0].clone()
        flat = first.view(-1)
        flat[flat.abs().argmin()] += 0.05
        return type(out)((first, *out[1:]))

    return run


def sleepy_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A backend that takes 3 s to compile (a trial long enough to freeze a worker in)."""
    time.sleep(3)
    return gm


class Dawdles(Toy):
    """toy-64's block stack, 20 ms slower per call (a sleep outside any graph): a trial lasts
    long enough for a test to act while it runs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.02)
        return super().forward(x)


def slow_toy() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Dawdles(4), (torch.randn(10, 10),)


class Pauses(torch.nn.Module):
    """A call that takes a known time (a sleep outside any graph, then one Linear): a model
    whose cost a time budget's plan must read."""

    def __init__(self, pause_s: float) -> None:
        super().__init__()
        self.pause_s, self.linear = pause_s, torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.pause_s)
        return self.linear(x)


def pausing() -> tuple[torch.nn.Module, tuple]:
    """100 ms a call."""
    torch.manual_seed(0)
    return Pauses(0.1), (torch.randn(4, 8),)


def pausing_briefly() -> tuple[torch.nn.Module, tuple]:
    """10 ms a call: ten times quicker than :func:`pausing`."""
    torch.manual_seed(0)
    return Pauses(0.01), (torch.randn(4, 8),)


class Residual(torch.nn.Module):
    """A pre-norm residual block: x + gelu(linear(norm(x)))."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm, self.linear = torch.nn.LayerNorm(width), torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(self.linear(self.norm(x)))


class DeepStack(torch.nn.Module):
    """160 residual blocks and a head: in bfloat16, eager's rounding of every intermediate
    adds up to errors of a quarter of the output's RMS, and a compile that keeps fewer
    intermediates in bfloat16 parts from eager by as much while being closer to the truth."""

    def __init__(self, blocks: int = 160, width: int = 64, vocab: int = 512) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Residual(width) for _ in range(blocks)])
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        torch.nn.init.normal_(self.head.weight, std=0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def deep_stack() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return DeepStack(), (torch.randn(16, 64),)


def fp32_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A legitimate backend that computes in float32 and rounds once at the end (what a
    compiler that fuses bfloat16 elementwise work does, taken to its end)."""
    wide = gm.float()

    def run(*args: object) -> object:
        out = wide(*[a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                     for a in args])  # fmt: skip
        dtype = next(
            a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()
        )
        return tuple(o.to(dtype) if isinstance(o, torch.Tensor) else o for o in out)

    return run


def shift_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A wrong backend: every output is rolled by one element (right values, wrong places)."""

    def run(*args: object) -> object:
        return tuple(o.roll(1) if isinstance(o, torch.Tensor) else o for o in gm(*args))

    return run


class Chain(torch.nn.Module):
    """200 elementwise steps on a small tensor: eager dispatches each one, Inductor fuses them
    into one loop, so a compiled strategy wins every timed round even on a loaded machine (a
    test that needs a compiled pick does not then hang on the sign test's noise). The tensor is
    small enough (16 x 16) that Inductor's loop is serial: an OpenMP loop waits at its barrier
    for a thread the loaded machine has descheduled, and ran 5-50x slower than eager in CI."""

    def __init__(self, steps: int = 200, width: int = 16) -> None:
        super().__init__()
        self.steps = steps
        self.scale = torch.nn.Parameter(torch.full((width,), 0.99))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.steps):
            x = x * self.scale + 0.01
        return x


def chain() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Chain(), (torch.randn(16, 16),)


def _first_input_name(names: list[str]) -> str:
    return names[len(names)]  # a bug deep in a backend: IndexError, as OpenVINO's was


def indexing_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A backend that fails inside a helper of its own (where the failure must be named)."""
    return _first_input_name([n.name for n in gm.graph.nodes if n.op == "placeholder"])


def bf16_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A backend that computes in bfloat16 whatever the study's dtype (OpenVINO's CPU plugin
    picks a lower inference precision by itself): right-looking, but not to float32's precision."""

    def run(*args: object) -> object:
        low = [a.bfloat16() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
               for a in args]  # fmt: skip
        with torch.no_grad():
            out = gm.to(torch.bfloat16)(*low)
        gm.to(torch.float32)
        return tuple(o.float() for o in out) if isinstance(out, (tuple, list)) else out.float()

    return run


class SlowToExport(torch.nn.Module):
    """Compiles as quickly as any small model, but its export (an AOTInductor build) lasts an
    hour: the build outlives any trial's timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():
            time.sleep(3600)
        return self.linear(x)


def slow_to_export() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return SlowToExport(), (torch.randn(4, 8),)


class Mixer(torch.nn.Module):
    """Every position reads the mean over the whole sequence (no attention mask): padding a
    request changes every output, so padding buckets must fail the accuracy gate."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.out = torch.nn.Embedding(64, 8), torch.nn.Linear(8, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        return self.out(x + x.mean(dim=1, keepdim=True))


def mixing() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Mixer(), (torch.randint(1, 64, (1, 8)),)


mixing.make_inputs = lambda batch, seq: (torch.randint(1, 64, (batch, seq)),)  # type: ignore[attr-defined]


class Matmuls(torch.nn.Module):
    """Four 256-wide Linear layers with ReLUs: enough arithmetic per call (a few ms on a CPU)
    that a backend doing none of it is plainly quicker than eager."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            *[m for _ in range(4) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def matmuls() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Matmuls(), (torch.randn(64, 256),)


matmuls.make_inputs = lambda batch, seq: (torch.randn(batch, seq, 256),)  # type: ignore[attr-defined]


def dawdling_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A backend whose every call sleeps 20 ms first: right answers, always slower than eager
    by more than a loaded CPU's noise (a strategy that cannot reach a front eager is on)."""

    def run(*args: object) -> object:
        time.sleep(0.02)
        return gm(*args)

    return run


def memo_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A backend that computes once per input shape and hands back those outputs after: right
    answers while the inputs stay the same (a trial's do), far quicker than eager."""
    seen: dict[tuple, object] = {}

    def run(*args: object) -> object:
        key = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)
        if key not in seen:
            seen[key] = gm(*args)
        return seen[key]

    return run


CHANGE = "AUTOTUNE_TEST_CHANGE"  # what a later run changed: "break", "slow" or "wrong"


class Changed(Matmuls):
    """:class:`Matmuls` whose code, where ``$AUTOTUNE_TEST_CHANGE`` is ``break`` when it is
    built, breaks the graph halfway: a model change a CI gate must name."""

    def __init__(self) -> None:
        super().__init__()
        self.breaks = os.environ.get(CHANGE) == "break"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers[:4](x)
        if self.breaks:
            torch._dynamo.graph_break()
        return self.layers[4:](x)


def changing() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Changed(), (torch.randn(64, 256),)


def changing_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """:func:`memo_backend`, far quicker than eager, unless ``$AUTOTUNE_TEST_CHANGE`` says at
    compile time that a later release made it ``slow`` (20 ms a call) or ``wrong`` (off by
    one)."""
    change, quick = os.environ.get(CHANGE), memo_backend(gm, example_inputs)

    def run(*args: object) -> object:
        out = quick(*args)  # type: ignore[operator]
        if change == "slow":
            time.sleep(0.02)
        if change == "wrong":
            return type(out)(t + 1 for t in out)  # type: ignore[arg-type, call-arg]
        return out

    return run


def negating_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A backend wrong everywhere: it negates every floating output of three dimensions (hidden
    states, logits), so that a greedy answer's tokens change."""

    def run(*args: object) -> object:
        out = gm(*args)
        return type(out)(
            -t if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() == 3 else t
            for t in out
        )

    return run


RECORD_S = 0.5  # what recording_backend's recording of a CUDA graph takes


def recording_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """Dynamo's graph as it is, run as Inductor's CUDA-graph trees run a graph on a GPU: its
    first call at a set of sizes warms up, its second records (:data:`RECORD_S`, logged as the
    trees log a recording, from a function named ``record_function``), later ones replay. A
    dynamic graph records again at each new set of sizes, as the trees do."""
    from torch._inductor import cudagraph_trees

    calls: dict[tuple, int] = {}

    def record_function() -> None:
        cudagraph_trees.log.debug("Recording function=%s", "partition_0")
        time.sleep(RECORD_S)

    def run(*args: object) -> object:
        key = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)
        calls[key] = calls.get(key, 0) + 1
        if calls[key] == 2:
            record_function()
        return gm(*args)

    return run


def dawdling_llama() -> tuple[torch.nn.Module, tuple]:
    """tiny-llama, 4 ms slower a forward where it runs eager (``$TEST_DAWDLE_S`` where set: a
    sleep that Dynamo's trace leaves out): any compiled strategy serves it faster than eager, as
    a large model's would."""
    import transformers

    class Dawdling(transformers.LlamaForCausalLM):
        def forward(self, *args: object, **kwargs: object) -> object:
            if not torch.compiler.is_compiling():
                time.sleep(float(os.environ.get("TEST_DAWDLE_S", "0.004")))
            return super().forward(*args, **kwargs)

    model, inputs = tiny_llama()
    model.__class__ = Dawdling
    return model, inputs


dawdling_llama.supports_generate = True  # type: ignore[attr-defined]
dawdling_llama.make_inputs = tiny_llama.make_inputs  # type: ignore[attr-defined]


PREFILL_S, PREFILL_MB = 0.5, 256  # what an eager prefill of the models below costs


def _eager_prefill(sleeps: bool, allocates: bool) -> torch.nn.Module:
    """The tiny Llama whose prefill (a forward of more than one token), run eager, sleeps
    :data:`PREFILL_S` and/or fills :data:`PREFILL_MB` MiB for a moment; compiled, neither (Dynamo
    traces the branch away): an eager prefill told apart from a compiled graph's recording, and
    eager's memory from the compiled side's."""
    import functools

    import transformers

    class EagerPrefill(transformers.LlamaForCausalLM):
        @functools.wraps(transformers.LlamaForCausalLM.forward)
        def forward(self, *args: object, **kwargs: object) -> object:
            ids = kwargs.get("input_ids", args[0] if args else None)
            compiling = torch.compiler.is_compiling()  # first: Dynamo guards nothing here
            if not compiling and isinstance(ids, torch.Tensor) and ids.shape[-1] > 1:
                if sleeps:
                    time.sleep(PREFILL_S)
                if allocates:
                    torch.ones(PREFILL_MB * 2**18).sum()
            return super().forward(*args, **kwargs)

    model, _ = tiny_llama()
    slow = EagerPrefill(model.config).eval()
    slow.load_state_dict(model.state_dict())
    return slow


def slow_eager_prefill() -> tuple[torch.nn.Module, tuple]:
    return _eager_prefill(True, False), (torch.randint(0, TINY_LLAMA["vocab_size"], (1, 8)),)


def heavy_eager_prefill() -> tuple[torch.nn.Module, tuple]:
    return _eager_prefill(False, True), (torch.randint(0, TINY_LLAMA["vocab_size"], (1, 8)),)


for _tiny in (slow_eager_prefill, heavy_eager_prefill):
    _tiny.supports_generate = True  # type: ignore[attr-defined]
    _tiny.make_inputs = tiny_llama.make_inputs  # type: ignore[attr-defined]
