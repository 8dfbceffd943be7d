"""The results file's JSON Schema, generated from the record types (docs/results-schema.json).

The dataclasses in results.py are the one definition of a results file; this module turns them into
a JSON Schema for other tools and a digest of their fields, so a test notices when a field changes
without SCHEMA_VERSION changing. Regenerate with `python -m bwbench.schema > docs/results-schema.json`.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import types
import typing
from dataclasses import MISSING, fields
from typing import Any

from .results import SCHEMA_VERSION, Check, Record, RunDocument

_RECORD_TYPES = (Record, Check, RunDocument)


def _field_docs(cls) -> dict[str, str]:
    """The docstring under each field of a dataclass (the string literal right after it)."""
    try:
        tree = ast.parse(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body, docs = tree.body[0].body, {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _type_schema(hint) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [_type_schema(a) for a in typing.get_args(hint)]
        return options[0] if len(options) == 1 else {"anyOf": options}
    if hint is type(None):
        return {"type": "null"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is str:
        return {"type": "string"}
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return {"type": "array", "items": _type_schema(item)}
    if origin is dict or hint is dict:
        return {"type": "object"}
    if hint is Any:
        return {}
    if inspect.isclass(hint) and hint in _RECORD_TYPES:
        return {"$ref": f"#/$defs/{hint.__name__}"}
    raise TypeError(f"no JSON Schema type for {hint!r}")


def _object_schema(cls) -> dict[str, Any]:
    hints, docs = typing.get_type_hints(cls), _field_docs(cls)
    properties, required = {}, []
    for f in fields(cls):
        prop = _type_schema(hints[f.name])
        if f.name in docs:
            prop = {"description": docs[f.name], **prop}
        properties[f.name] = prop
        if f.default is MISSING and f.default_factory is MISSING:
            required.append(f.name)
    return {"type": "object", "description": " ".join((cls.__doc__ or "").split()), "properties": properties,
            "required": required, "additionalProperties": True}


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a results file of the current SCHEMA_VERSION. Unknown keys are allowed
    (a newer writer's fields), which is how readers treat them too."""
    document = _object_schema(RunDocument)
    document["properties"]["schema"] = {"description": "bwbench.results/VERSION", "type": "string",
                                        "pattern": r"^bwbench\.results/[0-9]+$"}
    document["properties"]["records"] = {"type": "array", "items": {"$ref": "#/$defs/Record"}}
    document["properties"]["environment"] = _environment_schema()
    record = _object_schema(Record)
    record["properties"]["check"] = {"description": record["properties"]["check"].get("description", ""),
                                     "anyOf": [{"$ref": "#/$defs/Check"}, {"type": "null"}]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"bwbench results file, version {SCHEMA_VERSION}",
        "x-schema-version": SCHEMA_VERSION,
        "x-fields-digest": fields_digest(),
        **document,
        "$defs": {"Record": record, "Check": _object_schema(Check)},
    }


def _environment_schema() -> dict[str, Any]:
    """The machine facts a run records (device.DeviceInfo); none required, others allowed."""
    from .device import DeviceInfo

    schema = _object_schema(DeviceInfo)
    schema["required"] = []
    return schema


def fields_digest() -> str:
    """A short hash of every field name and type of the record types: it changes exactly when a
    field does, and a test holds it equal to results.FIELDS_DIGEST (bump SCHEMA_VERSION then)."""
    parts = []
    for cls in _RECORD_TYPES:
        hints = typing.get_type_hints(cls)
        parts += [f"{cls.__name__}.{f.name}:{hints[f.name]}" for f in fields(cls)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
