"""Generating with an export (autotune/ship/apply.py's apply_generation): the static cache as
long as the study measured, a request longer than it given a longer cache and eager's tokens,
never a wrong answer; the prefill left eager where the strategy says so."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import autotune
from autotune.ship import formats
from autotune.strategy import Strategy
from tests import models
from tests.helpers import generated_graphs


@pytest.mark.slow
def test_an_eager_prefill_compiles_the_decode_alone_over_prompt_lengths() -> None:
    model, _ = models.tiny_llama()
    counts = {}
    for prefill in ("compiled", "eager"):
        torch._dynamo.reset()
        gen = autotune.apply_generation(model, Strategy.create("full", "aot_eager",
                                                               prefill=prefill))  # fmt: skip
        gen.generation_config.max_cache_len = 40
        counts[prefill] = generated_graphs(gen, model, [(8, 5), (12, 5), (20, 5)])
    assert counts["eager"] == [1, 0, 0]  # one decode graph for the one cache
    assert counts["compiled"][0] == 2 and sum(counts["compiled"]) > 2  # prefills recompile


@pytest.mark.slow
def test_a_request_longer_than_the_exported_cache_gets_a_longer_one(tmp_path: Path) -> None:
    """The export's cache (its study's longest prompt plus answer) serves every shorter request
    with one decode graph; a longer request is given a longer cache (a recompile, a stall),
    never a wrong answer, and later requests keep it."""
    torch._dynamo.reset()
    model, _ = models.tiny_llama()
    s = Strategy.create("full", "aot_eager", prefill="eager")
    block = {"strategy": s.to_dict(), "generation": formats.cache_fields(24)}
    path = tmp_path / "best.json"
    path.write_text(formats.render(s, "torch", block, [], "hand") + "\n")
    gen = autotune.apply_generation(model, path)
    assert gen.generation_config.max_cache_len == 24
    # the third needs 36 positions, more than 24
    graphs = generated_graphs(gen, model, [(8, 6), (12, 12), (20, 16), (10, 4)])
    assert graphs[0] == 1 and graphs[1] == 0 and graphs[2] >= 1 and graphs[3] == 0, graphs
