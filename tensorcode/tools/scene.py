"""Scene: ranks visual descriptions of an image, or describes it, and reports where in the image it looked."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from .. import receipts
from . import _metrics as metrics
from . import _validation as validation
from ._base import CapturePlan, Tool
from ._configuration import SceneConfig
from ._decoding import log_probabilities
from ._ranking import distribution_tensor, soft_cross_entropy
from ._receipts import model_id
from ._text import Generator, TextEncoder, Tokenizer
from ._vision import PatchAttention, PatchEncoder, resize

__all__ = ["Scene"]

RANK, LANGUAGE = "rank", "language"
MODES = (RANK, LANGUAGE)
# Padded candidate slots get a finite score far below any real one: the softmax gives them no mass, and the
# objective's output stays a finite tensor that experiences can hold.
_PAD_SCORE = -1e4


class Scene(Tool):
    """An owned image model with two modes, fixed by the ``mode`` configuration field.

    Ranking mode (``Scene()``) takes ``{"pixels", "source_id", "question", "candidates": [{"id", "text"}]}``
    and returns a ``ranking`` receipt (:mod:`tensorcode.receipts`) with every candidate's image attention.
    Language mode (``Scene(mode="language")``) takes ``{"pixels", "source_id", "question"}`` and returns a
    ``generation`` receipt: a greedily decoded description, at most ``max_length`` bytes, with its
    log-probability. Either mode also accepts the envelope ``{"mode": ..., "inputs": ...}`` naming its own
    mode. Calling the tool with a list of inputs returns a list of receipts, computed as one batch.

    ``attention`` is ``{"type": "image", "source_id", "grid": [rows, cols], "image_size": [H, W],
    "weights"}``, with ``weights`` a ``rows x cols`` nested list summing to one: where the candidate's query
    (ranking) or the question (language) looked.

    ``pixels`` is a float tensor of shape ``(3, H, W)`` (RGB, channels first) with finite values in [0, 1], of
    any height and width: every image is resized (antialiased bilinear) to ``image_size`` x ``image_size``, so
    the receipt's patch grid has ``image_size // patch_size`` rows and columns and each cell covers
    ``H / rows`` x ``W / cols`` pixels of the original image (non-square images are stretched).

    Capture targets: in ranking mode a candidate id or index; in language mode reviewed description text (at
    most ``max_length`` UTF-8 bytes). A list of inputs with an equal-length list of targets is one batch.

    Configuration fields (JSON-safe):
        mode: ``"rank"`` (default) or ``"language"``.
        seed: integer seeding initialisation (``None`` for unseeded); default 0.
        image_size: side of the square working image in pixels; default 32.
        patch_size: side of one attention patch in working pixels; a power of two dividing ``image_size``;
            default 4.
        channels: width of the convolutional stem; default 16.
        dim: width of patch, text and decoder states; must be divisible by ``heads``; default 32.
        heads: attention heads in each patch-mixing block; default 2.
        layers: self-attention blocks mixing patch states (0 or more); default 0. Mixing lets a patch state
            describe other patches, so attention over mixed states says less about where the model looked.
        buckets: hashed word buckets of the open-vocabulary tokenizer; default 4096.
        max_words: words kept from each question or candidate text; default 32.
        max_length: generation length limit in UTF-8 bytes (language mode); default 64.
        limits: the largest request accepted (``max_batch``, ``max_candidates``, ``max_text_chars``,
            ``max_image_side``); see ``tensorcode.tools.Limits``.

    Upper bounds: ``image_size`` 512, ``patch_size`` 512, ``channels`` 256, ``dim`` 512, ``heads`` 64,
    ``layers`` 16, ``buckets`` 65536, ``max_words`` 512, ``max_length`` 4096. ``pixels`` may also be nested
    lists ``[3][H][W]`` of numbers in [0, 1] (JSON inputs).
    """

    NAME = "scene"
    CONFIG: ClassVar[type[SceneConfig]] = SceneConfig
    FIELDS: ClassVar[dict[str, Any]] = SceneConfig.defaults()

    def build(self) -> None:
        c = self._configuration
        dim = c["dim"]
        self.tokenizer = Tokenizer(buckets=c["buckets"], lowercase=True, max_words=c["max_words"])
        self.text = TextEncoder(c["buckets"], dim, c["max_words"])
        self.image = PatchEncoder(
            c["image_size"], c["patch_size"], c["channels"], dim, c["heads"], c["layers"]
        )
        self.question = torch.nn.Linear(dim, dim)
        self.attend = PatchAttention(dim, self.image.grid)
        if self.mode == RANK:
            self.candidate = torch.nn.Linear(dim, dim)
            self.query = torch.nn.Linear(2 * dim, dim)
            self.score = torch.nn.Linear(dim, dim)
        else:
            self.query = torch.nn.Linear(dim, dim)
            self.context = torch.nn.Sequential(torch.nn.Linear(2 * dim, dim), torch.nn.LayerNorm(dim))
            self.generator = Generator(dim, c["max_length"])

    @property
    def mode(self) -> str:
        return self._configuration["mode"]

    # -- receipts ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, inputs: dict | list[dict]) -> dict | list[dict]:
        """One receipt for one input mapping, or a list of receipts for a list of inputs (one batch)."""
        request = validation.read_inputs(self.NAME, inputs, self._configuration)
        examples, batch = _with_tensors(request.items), request.batched
        receipts = self._rank_receipts(examples) if self.mode == RANK else self._language_receipts(examples)
        return receipts if batch else receipts[0]

    def _rank_receipts(self, examples: list[dict]) -> list[dict]:
        scores, _, weights = self._rank(examples)
        model = model_id(self)
        out = []
        for i, example in enumerate(examples):
            count = len(example["candidates"])
            out.append(receipts.ranking(
                self.NAME, RANK, model, example["candidates"], scores[i, :count].tolist(),
                [self._attention(example, weights[i, k]) for k in range(count)],
            ))
        return out

    def _language_receipts(self, examples: list[dict]) -> list[dict]:
        context, weights = self._language(examples)
        descriptions = self.generator.generate(context)
        scores = log_probabilities(self.generator, context, descriptions)
        model = model_id(self)
        return [
            receipts.generation(self.NAME, LANGUAGE, model, [text], [score], self._attention(example, weights[i, 0]))
            for i, (example, text, score) in enumerate(zip(examples, descriptions, scores, strict=True))
        ]

    def _attention(self, example: dict, weights: torch.Tensor) -> dict:
        grid = self.image.grid
        # Row-major, one row per patch row; each cell covers H / rows x W / cols pixels of the original image.
        return receipts.image_attention(
            example["source_id"], [grid, grid], example["pixels"].shape[1:], weights.reshape(grid, grid).tolist()
        )

    # -- model ---------------------------------------------------------------------------------------------
    def _rank(self, examples: list[dict]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Scores ``(batch, candidates)`` padded with ``_PAD_SCORE``, their mask, and attention weights.

        The weights are ``(batch, candidates, patches)``: each candidate's query attends over the patches.
        """
        patches = self._patches(examples)  # (batch, patches, dim)
        question = self.question(self._encode([e["question"] for e in examples]))  # (batch, dim)
        counts = [len(e["candidates"]) for e in examples]
        width = max(counts)
        mask = torch.tensor([[j < n for j in range(width)] for n in counts], device=patches.device)
        flat = self.candidate(
            self._encode([c["text"] for e in examples for c in e["candidates"]])
        )  # (all, dim)
        candidates = flat.new_zeros(len(examples), width, flat.shape[-1]).masked_scatter(
            mask.unsqueeze(-1), flat
        )  # (batch, candidates, dim)
        queries = self.query(torch.cat([question.unsqueeze(1).expand_as(candidates), candidates], dim=-1))
        seen, weights = self.attend(
            queries, patches
        )  # (batch, candidates, dim), (batch, candidates, patches)
        # An unscaled dot product: scaling by 1/sqrt(dim) left the scores too flat to train quickly.
        scores = (self.score(seen) * candidates).sum(-1)  # (batch, candidates)
        return scores.masked_fill(~mask, _PAD_SCORE), mask, weights

    def _language(self, examples: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
        """Decoder context ``(batch, dim)`` and attention ``(batch, 1, patches)``."""
        patches = self._patches(examples)
        question = self.question(self._encode([e["question"] for e in examples]))  # (batch, dim)
        seen, weights = self.attend(self.query(question).unsqueeze(1), patches)  # (batch, 1, dim)
        # Normalised rather than squashed: a tanh here saturated until every image gave the decoder the same
        # context.
        context = self.context(torch.cat([seen.squeeze(1), question], dim=-1))
        return context, weights

    def _patches(self, examples: list[dict]) -> torch.Tensor:
        size, device = self._configuration["image_size"], self.device
        pixels = [e["pixels"].to(device) for e in examples]
        if all(p.shape == pixels[0].shape for p in pixels):
            images = resize(torch.stack(pixels), size)  # (batch, 3, size, size)
        else:
            images = torch.stack([resize(p, size) for p in pixels])
        return self.image(images)

    def _encode(self, texts: list[str]) -> torch.Tensor:
        ids, mask = self.tokenizer.batch(texts, self.device)
        return self.text(ids, mask)[2]  # (texts, dim)

    # -- training protocol ---------------------------------------------------------------------------------
    def objective(self, batch: Any) -> dict[str, torch.Tensor]:
        """The training forward over a captured batch ``{"mode", "examples"}``.

        Ranking returns ``{"scores", "mask"}``; language returns ``{"context"}``, which the language loss
        decodes with teacher forcing against the reviewed text (the feedback never enters the inputs).
        """
        if not (
            isinstance(batch, dict)
            and batch.get("mode") == self.mode
            and isinstance(batch.get("examples"), list)
        ):
            raise ValueError(
                f"batch: expected {{'mode': {self.mode!r}, 'examples': [...]}} from Scene.prepare_capture"
            )
        request = validation.read_inputs(
            self.NAME, {"mode": self.mode, "inputs": batch["examples"]}, self._configuration
        )
        examples = _with_tensors(request.items)
        if self.mode == RANK:
            scores, mask, _ = self._rank(examples)
            return {"scores": scores, "mask": mask}
        return {"context": self._language(examples)[0]}

    def losses(self) -> dict:
        if self.mode == RANK:
            return {"scene.rank": self._rank_loss}
        return {"scene.language": self._language_loss}

    def evaluation_metrics(self) -> dict:
        if self.mode == RANK:
            return {"scene.rank": lambda output, target: metrics.top1(output["scores"], output["mask"], target)}
        return {
            "scene.language": lambda output, target: metrics.exact_match(
                self.generator, output["context"], [target] if isinstance(target, str) else list(target)
            )
        }

    def _rank_loss(self, output: dict, target: torch.Tensor) -> torch.Tensor:
        return soft_cross_entropy(output["scores"], output["mask"], target)

    def _language_loss(self, output: dict, target: Any) -> torch.Tensor:
        return self.generator.loss(output["context"], [target] if isinstance(target, str) else list(target))

    def plan_capture(self, inputs: Any, targets: Any) -> CapturePlan:
        """Validate inputs and targets; the plan holds each image once, as a float32 tensor."""
        request = validation.read_inputs(self.NAME, inputs, self._configuration)
        checked = validation.read_targets(self.NAME, request, targets, self._configuration)
        examples = _with_tensors(request.items)
        return CapturePlan(
            operation=self.NAME,
            inputs={"mode": self.mode, "examples": examples},
            target=distribution_tensor(checked) if self.mode == RANK else checked,
            loss=f"scene.{self.mode}",
            examples=len(examples),
        )


def _with_tensors(examples: list[dict]) -> list[dict]:
    """Examples whose pixels came as nested lists get them as float32 tensors."""
    return [
        e if isinstance(e["pixels"], torch.Tensor) else {**e, "pixels": torch.tensor(e["pixels"], dtype=torch.float32)}
        for e in examples
    ]
