"""Malformed experience files: each is refused by ``load_experience`` with ``ExperienceError`` (a ``ValueError``)
whose message names the problem. The corpus is ``experience_corpus/``; ``make_corpus.py`` regenerates it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from tensorcode import ExperienceError, training

torch.set_num_threads(1)
CORPUS = Path(__file__).resolve().parent / "experience_corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))


def _load_maker():
    name = "experience_corpus_maker"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CORPUS / "make_corpus.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


maker = _load_maker()


def load(path: Path):
    return training.load_experience(path, operations=maker.operations(), codecs=maker.CODECS)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_malformed_file_is_refused_with_a_message_naming_the_problem(name):
    with pytest.raises(ExperienceError) as info:
        load(CORPUS / name)
    assert MANIFEST[name] in str(info.value)
    assert isinstance(info.value, ValueError)


def test_base_file_is_valid_and_replays():
    session = load(CORPUS / "base.json")
    assert [c.binding for c in session.calls] == ["encode", "consult", "combine"]
    out = session.replay(session.supervisions[0].output, boundary="recorded")
    # combine(h, score, extra) with h = x / 2, score recorded as h.sum(-1) * 0.25, len(extra["tag"]) == 2
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) / 8
    assert torch.equal(out, x[:, :2] + (x.sum(-1) * 0.25).unsqueeze(-1) + 2)
    assert session.supervisions[1].target == maker.Record("no", 1.0)
    assert session.supervisions[1].source == ("corpus:a", "corpus:b")


def test_every_corpus_file_is_listed_in_the_manifest():
    on_disk = {p.name for p in CORPUS.glob("*.json")} - {"manifest.json", "base.json"}
    assert on_disk == set(MANIFEST)


def test_corpus_covers_the_required_defects():
    required = {
        "truncated_json.json", "duplicate_keys.json", "nan_constant.json", "unknown_format.json",
        "unknown_version.json", "missing_top_level_field.json", "extra_top_level_field.json", "pickle_tag.json",
        "dataclass_not_allowlisted.json", "forward_reference.json", "dangling_reference.json",
        "missing_binding.json", "fingerprint_label_order.json", "nonfinite_tensor.json", "complex_tensor.json",
        "sparse_tensor.json", "base64_garbage.json", "shape_byte_count_mismatch.json",
        "deeply_nested_payload.json",
    }
    assert required <= set(MANIFEST)


def test_deeply_nested_payload_holds_100000_nested_lists():
    text = (CORPUS / "deeply_nested_payload.json").read_text(encoding="utf-8")
    assert "[" * 100_000 in text


def test_committed_corpus_matches_its_generator(tmp_path):
    """The corpus is reproducible: regenerating it gives the committed bytes."""
    maker.main(tmp_path)
    for path in CORPUS.glob("*.json"):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name
