"""Image pieces for Scene: resizing, a patch encoder and attention over its patches.

Images of any size are resized to one square working size, so a batch is one tensor and the patch grid (what a
reviewer sees attention over) has the same shape for every image; each grid cell covers the same fraction of
the original picture whatever its size.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def resize(pixels: torch.Tensor, size: int) -> torch.Tensor:
    """``(..., 3, H, W)`` -> ``(..., 3, size, size)``, antialiased bilinear; as is if already that size."""
    if tuple(pixels.shape[-2:]) == (size, size):
        return pixels
    flat = pixels.reshape(-1, *pixels.shape[-3:])
    resized = F.interpolate(flat, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return resized.clamp(0.0, 1.0).reshape(*pixels.shape[:-2], size, size)


class PatchEncoder(nn.Module):
    """Convolution and max-pooling stages down to one state per patch, then self-attention across patches.

    ``patch_size`` must be a power of two: each stage halves the resolution, so a patch state summarises its
    own ``patch_size`` square (its receptive field reaches only a pixel or two past it). The last projection is
    per patch, not a convolution across patches: a patch next to a shape must not describe the shape, or
    attention could find the shape by looking beside it and the heat map would point at the wrong cells.
    """

    def __init__(self, image_size: int, patch_size: int, channels: int, dim: int, heads: int, layers: int):
        super().__init__()
        self.grid = image_size // patch_size
        stages, width = [], 3
        for _ in range(patch_size.bit_length() - 1):
            stages += [nn.Conv2d(width, channels, 3, padding=1), nn.GELU(), nn.MaxPool2d(2)]
            width = channels
        self.stem = nn.Sequential(*stages)
        self.patchify = nn.Conv2d(width, dim, 1)
        self.rows = nn.Parameter(0.02 * torch.randn(self.grid, dim))
        self.cols = nn.Parameter(0.02 * torch.randn(self.grid, dim))
        self.blocks = nn.ModuleList(_Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``(batch, 3, size, size)`` in [0, 1] -> patch states ``(batch, grid * grid, dim)``, row-major."""
        features = self.patchify(self.stem(_standardize(images)))  # (batch, dim, grid, grid)
        position = self.rows[:, None, :] + self.cols[None, :, :]  # (grid, grid, dim)
        patches = (features.permute(0, 2, 3, 1) + position).flatten(1, 2)  # (batch, patches, dim)
        for block in self.blocks:
            patches = block(patches)
        return self.norm(patches)


class PatchAttention(nn.Module):
    """Attention of query vectors over patch states: the only way a query sees the image.

    What a query sees is the attention-weighted patch values and where it looked (the attention-weighted patch
    coordinates, so descriptions can say "top left"). There is no whole-image shortcut (an earlier glance at the
    per-feature maximum over all patches did most of the recognising), so the attention weights a receipt
    shows are where the model looked: a patch's content reaches the query only in proportion to its weight.
    """

    def __init__(self, dim: int, grid: int):
        super().__init__()
        self.keys = nn.Linear(dim, dim)
        self.values = nn.Linear(dim, dim)
        self.where = nn.Linear(2, dim)
        axis = torch.linspace(-1.0, 1.0, grid)
        coordinates = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), dim=-1).reshape(grid * grid, 2)
        self.register_buffer("coordinates", coordinates, persistent=False)  # (patches, 2): row, column

    def forward(self, queries: torch.Tensor, patches: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What each query sees ``(batch, q, dim)`` and its attention weights ``(batch, q, patches)``."""
        values = self.values(patches)  # (batch, p, dim)
        logits = queries @ self.keys(patches).transpose(1, 2) / math.sqrt(queries.shape[-1])  # (batch, q, p)
        weights = logits.softmax(-1)
        seen = weights @ values + self.where(weights @ self.coordinates)  # (batch, q, dim)
        return seen, weights


def _standardize(images: torch.Tensor) -> torch.Tensor:
    """Per-image, per-channel centring on the median and scaling by the median absolute deviation.

    Shapes stand out whatever the background's colour. The median statistics are the background's (a shape
    covers less than half of an image), so a background patch says nothing about the shape: centring on the
    mean let every patch tell the shape's colour, and attention could then recognise it without looking at
    it. The floor on the deviation keeps a flat image from amplifying its noise into strong features.
    """
    flat = images.flatten(2)  # (batch, 3, pixels)
    centre = flat.median(-1, keepdim=True).values  # (batch, 3, 1)
    spread = (flat - centre).abs().median(-1, keepdim=True).values
    return (images - centre.unsqueeze(-1)) / (spread.unsqueeze(-1) + 0.05)


class _Block(nn.Module):
    """Pre-norm self-attention and MLP without dropout, so training and evaluation compute one function."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, tokens, 3, self.heads, dim // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (batch, heads, tokens, head_dim)
        mixed = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, tokens, dim)
        x = x + self.proj(mixed)
        return x + self.mlp(self.norm2(x))
