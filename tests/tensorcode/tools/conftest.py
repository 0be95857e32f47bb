"""Every receipt the tools build during these tests is checked against tensorcode/schemas/receipt.schema.json."""

from __future__ import annotations

import functools
import json
from importlib import resources

import jsonschema
import pytest

from tensorcode import receipts

_VALIDATOR = jsonschema.Draft202012Validator(
    json.loads(resources.files("tensorcode").joinpath("schemas/receipt.schema.json").read_text())
)


def _checked(build):
    @functools.wraps(build)
    def checked(*args, **kwargs):
        receipt = build(*args, **kwargs)
        document = json.loads(json.dumps(receipt, allow_nan=False))
        error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(document))
        if error is not None:
            raise AssertionError(f"a {receipt.get('kind')} receipt does not match receipt.schema.json: "
                                 f"{error.message} at {list(error.absolute_path)}")
        receipts.check(receipt)
        return receipt

    return checked


@pytest.fixture(autouse=True)
def _receipts_match_their_schema(monkeypatch):
    for kind in receipts.KINDS:
        monkeypatch.setattr(receipts, kind, _checked(getattr(receipts, kind)))
    yield
