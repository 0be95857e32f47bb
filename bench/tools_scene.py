"""Scene's section of ``bench/tools.py``: 64x64 images of coloured shapes, ranking and language modes."""

from __future__ import annotations

import torch

from tensorcode.tools.scene import Scene

COLOURS = {"red": (0.9, 0.1, 0.1), "green": (0.1, 0.8, 0.1), "blue": (0.15, 0.25, 0.95)}
SHAPES = ("circle", "square", "cross")
SIZE = 64


def _image(colour: str, shape: str, rng: torch.Generator) -> torch.Tensor:
    """A ``(3, 64, 64)`` float image in [0, 1]: one coloured shape on a noisy dark background."""
    image = torch.rand(3, 1, 1, generator=rng) * 0.35 + 0.03 * torch.randn(3, SIZE, SIZE, generator=rng)
    r = int(torch.randint(8, 18, (1,), generator=rng))
    cy, cx = (int(torch.randint(r + 1, SIZE - r - 1, (1,), generator=rng)) for _ in "yx")
    ys, xs = torch.arange(SIZE).view(-1, 1) - cy, torch.arange(SIZE).view(1, -1) - cx
    if shape == "circle":
        region = ys**2 + xs**2 <= (r + 0.5) ** 2
    elif shape == "square":
        region = (ys.abs() <= r) & (xs.abs() <= r)
    else:
        region = ((ys.abs() <= r) & (xs.abs() <= r // 3)) | ((xs.abs() <= r) & (ys.abs() <= r // 3))
    tint = torch.tensor(COLOURS[colour]).view(3, 1, 1)
    return torch.where(region, tint.expand(3, SIZE, SIZE), image).clamp(0, 1)


def _examples(count: int) -> list[tuple[dict, str, str]]:
    """``(ranking input, target id, reviewed description)`` for ``count`` images."""
    rng = torch.Generator().manual_seed(0)
    names = [(c, s) for c in COLOURS for s in SHAPES]
    examples = []
    for i in range(count):
        colour, shape = names[i % len(names)]
        candidates = [{"id": f"{c}-{s}", "text": f"a {c} {s}"} for c, s in names]
        item = {
            "pixels": _image(colour, shape, rng),
            "source_id": f"image:{i}",
            "question": "which description fits the image?",
            "candidates": candidates,
        }
        examples.append((item, f"{colour}-{shape}", f"a {colour} {shape}"))
    return examples


def cases(device) -> list[tuple]:
    """``[(name, tool, single_input, batch_inputs, batch_targets)]`` with the tools on ``device``."""
    examples = _examples(32)
    ranking = [x for x, _, _ in examples]
    language = [{k: v for k, v in x.items() if k != "candidates"} for x in ranking]
    return [
        ("scene.rank", Scene().to(device), ranking[0], ranking, [y for _, y, _ in examples]),
        (
            "scene.language",
            Scene(mode="language").to(device),
            language[0],
            language,
            [t for _, _, t in examples],
        ),
    ]
