"""A small vision transformer for the held-out search records (bench/efficiency.py): the
catalog builds text models, so this one is named as code, ``--model bench.models.vit:small``.
Random weights from a fixed seed; one 224 x 224 image, 196 patches of 16 x 16."""

from __future__ import annotations

import torch
from transformers import ViTConfig, ViTModel


def small() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    """ViT with hidden 192, 4 layers, 3 heads (DeiT-tiny's width, a third of its depth)."""
    torch.manual_seed(0)
    config = ViTConfig(hidden_size=192, num_hidden_layers=4, num_attention_heads=3,
                       intermediate_size=768, image_size=224, patch_size=16,
                       attn_implementation="sdpa")  # fmt: skip
    model = ViTModel(config, add_pooling_layer=False).eval()
    return model, (torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0)),)
