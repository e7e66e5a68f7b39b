"""Schema types: parsing (with the references already resolved), the string the registry stores,
and each type's compatibility rules as Confluent applies them.

`parse(schema_type, text, references)` returns a ParsedSchema (base.py) or raises InvalidSchemaError.
A ParsedSchema answers `backward_errors(old)`: why data written with `old` cannot be read with
this schema (an empty list: it can). FORWARD is the same check the other way round
(compatibility.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import invalid_schema

if TYPE_CHECKING:
    from .base import ParsedSchema, ResolvedReference

SCHEMA_TYPES = ("JSON", "PROTOBUF", "AVRO")  # the order Confluent's /schemas/types lists them in


def parse(schema_type: str, text: str, references: list[ResolvedReference]) -> ParsedSchema:
    if not isinstance(text, str) or not text.strip():
        raise invalid_schema("the schema is empty")
    schema_type = (schema_type or "AVRO").upper()
    for ref in references:
        if ref.schema.schema_type != schema_type:
            raise invalid_schema(f"reference {ref.name!r} ({ref.subject} version {ref.version}) is a "
                                 f"{ref.schema.schema_type} schema, not {schema_type}")
    if schema_type == "AVRO":
        from .avro import parse_avro
        return parse_avro(text, references)
    if schema_type == "JSON":
        from .json_schema import parse_json
        return parse_json(text, references)
    if schema_type == "PROTOBUF":
        from .protobuf import parse_protobuf
        return parse_protobuf(text, references)
    raise invalid_schema(f"unknown schema type {schema_type!r}; the registry knows {', '.join(SCHEMA_TYPES)}")
