"""A Scene item's pixels as a PNG data URL, so the image arrives inside the item page's HTML.

Pixels are stored as JSON: nested lists of floats in [0, 1], channels first ``[3][H][W]`` (the tool's layout),
channels last ``[H][W][3]``, or greyscale ``[H][W]``. A ``data:image/...`` string is passed through. Anything
else gives no image (the heat map is still drawn on its own).
"""

from __future__ import annotations

import base64
import math
import struct
import zlib
from typing import Any

MAX_SIDE = 1024


def data_url(pixels: Any) -> str | None:
    if isinstance(pixels, str):
        return pixels if pixels.startswith(("data:image/png;base64,", "data:image/jpeg;base64,")) else None
    rows = _rgb_rows(pixels)
    if rows is None:
        return None
    return "data:image/png;base64," + base64.b64encode(png(rows)).decode("ascii")


def png(rows: list[list[tuple[int, int, int]]]) -> bytes:
    """An 8-bit RGB PNG of `rows` (each a list of (r, g, b) bytes)."""
    height, width = len(rows), len(rows[0])
    raw = b"".join(b"\x00" + bytes(v for pixel in row for v in pixel) for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def _rgb_rows(pixels: Any) -> list[list[tuple[int, int, int]]] | None:
    if not _is_grid(pixels):
        return None
    if len(pixels) in (1, 3) and all(_is_grid(p) for p in pixels) and not isinstance(pixels[0][0][0], list):
        # channels first: (C, H, W)
        planes = pixels if len(pixels) == 3 else pixels * 3
        height, width = len(planes[0]), len(planes[0][0])
        if not _fits(height, width) or any(len(p) != height or any(len(r) != width for r in p) for p in planes):
            return None
        return [[tuple(_byte(planes[c][y][x]) for c in range(3)) for x in range(width)] for y in range(height)]
    height, width = len(pixels), len(pixels[0])
    if not _fits(height, width) or any(not isinstance(r, list) or len(r) != width for r in pixels):
        return None
    if isinstance(pixels[0][0], list):
        # channels last: (H, W, 3)
        if any(not isinstance(p, list) or len(p) != 3 for r in pixels for p in r):
            return None
        return [[tuple(_byte(v) for v in p) for p in row] for row in pixels]
    return [[(_byte(v),) * 3 for v in row] for row in pixels]


def _is_grid(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], list) and bool(value[0])


def _fits(height: int, width: int) -> bool:
    return 0 < height <= MAX_SIDE and 0 < width <= MAX_SIDE


def _byte(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0
    return min(max(round(value * 255), 0), 255)
