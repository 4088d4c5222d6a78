"""Time building Gemma-2B (all 18 layers, bfloat16) with autotune.catalog vs transformers' default.

Run from the repository root: ``python bench/construction.py [--repeats 3] [--no-default]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def finite_logits(model: object, input_ids: object) -> bool:
    """A forward on batch 1 x 8 tokens gives finite logits."""
    import torch

    with torch.no_grad():
        logits = model(input_ids[:1, :8]).logits  # type: ignore[operator,index]
    return bool(torch.isfinite(logits).all())


def ours(repeats: int) -> list[float]:
    """Time ``build(ModelRef("gemma-2b"), Workload(dtype="bfloat16"))``."""
    from autotune.catalog import ModelRef, build
    from autotune.workload import Workload

    times = []
    for repeat in range(repeats):
        start = time.perf_counter()
        model, (input_ids,) = build(ModelRef("gemma-2b"), Workload(dtype="bfloat16"))
        elapsed = time.perf_counter() - start
        params = sum(p.numel() for p in model.parameters())
        finite = finite_logits(model, input_ids)
        print(
            f"ours    #{repeat + 1}: {elapsed:6.2f} s  ({params / 1e9:.2f}B params, "
            f"{len(model.model.layers)} layers, finite logits: {finite})",
            flush=True,
        )
        if not finite:
            raise SystemExit("non-finite logits")
        times.append(elapsed)
        del model, input_ids
        gc.collect()
    return times


def default() -> float:
    """Time transformers' own construction: ``GemmaForCausalLM`` with default init, bf16."""
    import torch
    from transformers import GemmaForCausalLM

    from autotune.catalog.hf import make_config
    from autotune.catalog.presets import PRESETS

    config = make_config(PRESETS["gemma-2b"], None)
    start = time.perf_counter()
    model = GemmaForCausalLM._from_config(config, dtype=torch.bfloat16)
    elapsed = time.perf_counter() - start
    print(f"default #1: {elapsed:6.2f} s  (GemmaForCausalLM(config), dtype bfloat16)", flush=True)
    del model
    gc.collect()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-default", action="store_true", help="skip transformers' default")
    args = parser.parse_args()

    start = time.perf_counter()
    import transformers  # noqa: F401
    from transformers import GemmaForCausalLM  # noqa: F401

    print(f"import transformers + GemmaForCausalLM: {time.perf_counter() - start:.2f} s")
    times = ours(args.repeats)
    best = min(times)
    line = f"ours: best {best:.2f} s, mean {sum(times) / len(times):.2f} s over {len(times)}"
    if not args.no_default:
        slow = default()
        line += f"; default {slow:.2f} s; speed-up x{slow / best:.1f}"
    print(line)


if __name__ == "__main__":
    main()
