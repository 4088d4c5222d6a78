"""The KV cache a generate strategy serves with (autotune/strategy/kv_cache.py): one static cache
for the longest request, or one a bucket of prompt-plus-answer lengths; ``generate`` through
``apply_generation`` hands each request its bucket's cache, one decode graph a cache length."""

from __future__ import annotations

import importlib

import pytest
import torch

import autotune
from autotune.strategy import Strategy
from tests import models
from tests.helpers import generated_graphs

TOTALS = [20, 40, 70, 130, 30, 31]


def test_each_request_s_cache_length_by_kind() -> None:
    kv_cache = importlib.import_module("autotune.strategy.kv_cache")
    assert kv_cache.lengths("single", TOTALS) == (130,) * 6
    assert kv_cache.lengths("pow2", TOTALS) == (32, 64, 128, 256, 32, 32)
    found = kv_cache.edges_of("quantiles", TOTALS)
    assert found == (30, 31, 70, 130)  # the quartiles of the lengths, the longest last
    assert kv_cache.lengths("quantiles", TOTALS) == (30, 70, 70, 130, 30, 31)
    assert kv_cache.length("quantiles", 200, 130, found) == 256  # past the longest: its pow2
    assert kv_cache.length("single", 200, 130) == 200  # never shorter than the request
    assert kv_cache.edges_of("pow2", TOTALS) is None


@pytest.mark.slow
def test_generate_with_a_cache_a_bucket_compiles_one_decode_graph_a_cache_length() -> None:
    """Static decode graphs (dynamic=false, the prefill eager): a graph for each pow2 cache
    the requests meet, none for a request whose cache was met before; every request's tokens
    eager's."""
    torch._dynamo.reset()
    model, _ = models.tiny_llama()
    s = Strategy.create("full", "aot_eager", dynamic=False, prefill="eager", kv_cache="pow2")
    gen = autotune.apply_generation(model, s)
    # caches 16, 32, 16, 64, 32
    graphs = generated_graphs(gen, model, [(8, 6), (20, 8), (10, 4), (40, 20), (24, 6)])
    assert graphs == [1, 1, 0, 1, 0], graphs


class Caches:
    """The KV cache each forward of a model was handed, and its first layer's key tensor's
    address, read by a hook torch calls on every call of the module."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seen: list[tuple[int, int]] = []

        def hook(module: object, args: object, kwargs: dict, out: object) -> None:
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            keys = cache.layers[0].keys
            self.seen.append((id(cache), keys.data_ptr()))

        model.register_forward_hook(hook, with_kwargs=True)


@pytest.mark.parametrize("kind", ["single", "pow2"])
def test_every_generate_call_reuses_its_static_cache_at_the_same_addresses(kind: str) -> None:
    """A CUDA graph records again where a static input's address changes: through
    ``apply_generation`` every ``generate`` of one batch size and length (here four) is
    handed the one cache, reset in place, its tensors where they were. Before, with the
    ``single`` cache, transformers made a new ``StaticCache`` at every call, so that on a GPU
    each request recorded its graphs again (and none of it counted toward the limit)."""
    model, (prompt,) = models.tiny_llama()
    gen = autotune.apply_generation(model, Strategy.create("full", "eager", kv_cache=kind))
    caches = Caches(gen)
    calls = []
    for _ in range(4):
        before = len(caches.seen)
        with torch.no_grad():
            gen.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4,
                         do_sample=False)  # fmt: skip
        calls.append(set(caches.seen[before:]))
    assert all(len(c) == 1 for c in calls), calls  # one cache through a call's forwards
    assert len(set.union(*calls)) == 1, calls  # ...and the same one, where it was, at every call


def test_hidden_states_under_cuda_graphs_are_refused_in_one_line() -> None:
    """``generate(..., output_hidden_states=True)`` keeps each step's hidden states as the
    forward returned them (its logits it copies): under CUDA graphs the next replay overwrites
    them, and reading them raises "overwritten". Refused before anything is compiled, from the
    call's keywords or the generation config; without CUDA graphs they are returned."""
    from autotune.errors import ConfigError

    model, (prompt,) = models.tiny_llama()
    graphs = autotune.apply_generation(model, Strategy.create("full", "inductor",
                                                              "reduce-overhead"))  # fmt: skip
    with pytest.raises(ConfigError, match=r"output_hidden_states=True\) under CUDA graphs"):
        graphs.generate(prompt, max_new_tokens=3, output_hidden_states=True,
                        return_dict_in_generate=True)  # fmt: skip
    graphs.generation_config.output_attentions = True
    graphs.generation_config.return_dict_in_generate = True
    with pytest.raises(ConfigError, match=r"output_attentions=True\) under CUDA graphs"):
        graphs.generate(prompt, max_new_tokens=3)
    plain = autotune.apply_generation(model, Strategy.create("full", "eager"))
    with torch.no_grad():
        out = plain.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3,
                             do_sample=False, output_hidden_states=True,
                             return_dict_in_generate=True)  # fmt: skip
    assert len(out.hidden_states) == 3
