"""The tool.json schema, derived from the configuration dataclasses so its bounds cannot drift from the code.

Regenerate the shipped file with ``python tests/tensorcode/schema_sources.py``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tensorcode.tools._artifacts import FORMAT, VERSION
from tensorcode.tools._configuration import CONFIGS, INVESTIGATOR_MODES, Configuration

SCHEMAS = Path(__file__).resolve().parents[2] / "tensorcode" / "schemas"


def _field(f: dataclasses.Field) -> dict:
    kind = f.metadata["kind"]
    if kind == "int":
        return {"type": "integer", "minimum": f.metadata["low"], "maximum": f.metadata["high"], "default": f.default}
    if kind == "bool":
        return {"type": "boolean", "default": f.default}
    if kind == "choice":
        return {"enum": list(f.metadata["options"]), "default": f.default}
    if kind == "seed":
        return {"type": ["integer", "null"], "minimum": -(2**63), "maximum": 2**64 - 1, "default": 0}
    if kind == "modes":
        return {"type": "array", "items": {"enum": list(INVESTIGATOR_MODES)}, "minItems": 1, "uniqueItems": True,
                "default": list(INVESTIGATOR_MODES)}
    section = _object(f.metadata["type"])
    return {"oneOf": [section, {"type": "null"}]} if f.metadata["nullable"] else section


def _object(cls: type[Configuration]) -> dict:
    return {
        "type": "object",
        "properties": {f.name: _field(f) for f in dataclasses.fields(cls)},
        "additionalProperties": False,
    }


def tool_schema() -> dict:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://tensorcode.invalid/schemas/tool.schema.json",
        "title": "tool.json: a tool saved by save_pretrained",
        "description": "Registered tool name, format version and configuration (missing fields take their "
        "defaults; every number has an upper bound). Weights are in model.safetensors beside it.",
        "type": "object",
        "required": ["format", "version", "tool", "configuration"],
        "additionalProperties": False,
        "properties": {
            "format": {"const": FORMAT},
            "version": {"const": VERSION},
            "tool": {
                "type": "string",
                "minLength": 1,
                "description": "A registered tool (" + ", ".join(sorted(CONFIGS)) + "), whose configuration "
                "is then checked here, or the NAME of a tool class of your own.",
            },
            "configuration": {"type": "object"},
        },
        "allOf": [
            {
                "if": {"properties": {"tool": {"const": name}}},
                "then": {"properties": {"configuration": _object(cls)}},
            }
            for name, cls in sorted(CONFIGS.items())
        ],
    }




def validator(name: str):
    """A jsonschema validator for the shipped ``<name>.schema.json``, resolving references between the files."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    documents = {path.name: json.loads(path.read_text()) for path in SCHEMAS.glob("*.schema.json")}
    registry = Registry().with_resources(
        (document["$id"], Resource.from_contents(document)) for document in documents.values()
    )
    return Draft202012Validator(documents[f"{name}.schema.json"], registry=registry)


if __name__ == "__main__":
    (SCHEMAS / "tool.schema.json").write_text(json.dumps(tool_schema(), indent=2) + "\n")
