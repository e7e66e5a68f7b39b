"""Avro schemas: fastavro parses and validates them (names, defaults) and gives the normalized
form; Apache Avro's own SchemaCompatibility port (`avro.compatibility`) judges reader
against writer, which is exactly what Confluent runs (Avro's Java SchemaCompatibility).

References are named types defined by other subjects: they are parsed first into the same name
table, so the schema may use them by full name.
"""

from __future__ import annotations

import json
from typing import Any

import avro.compatibility
import avro.errors
import avro.name
import avro.schema
import fastavro
from fastavro.schema import SchemaParseException, UnknownType

from ..errors import invalid_schema
from .base import ParsedSchema, ResolvedReference

_CHECKER = avro.compatibility.ReaderWriterCompatibilityChecker()


class AvroSchema(ParsedSchema):
    schema_type = "AVRO"

    def __init__(self, data: Any, dependencies: list[Any]):
        self.data = data
        self.dependencies = dependencies  # referenced schemas' JSON, dependencies first
        self.canonical = json.dumps(data, separators=(",", ":"))
        named: dict = {}
        names = avro.name.Names()
        try:
            for dep in dependencies:
                fastavro.parse_schema(dep, named_schemas=named, _write_hint=False)
                avro.schema.make_avsc_object(dep, names)
            self.parsed = fastavro.parse_schema(data, named_schemas=named, _write_hint=False)
            self.avro = avro.schema.make_avsc_object(data, names)
        except (SchemaParseException, UnknownType, avro.errors.AvroException, ValueError, TypeError,
                KeyError, AttributeError) as exc:
            raise invalid_schema(f"{type(exc).__name__}: {exc}") from None

    def normalized(self) -> str:
        """fastavro's parsed form: full names, defaults, docs and logical types kept (the Parsing
        Canonical Form would drop the last three, and this string may be stored)."""
        return json.dumps(self.parsed, separators=(",", ":"), sort_keys=True)

    def backward_errors(self, old: ParsedSchema, labels: tuple[str, str] = ("new", "old")) -> list[str]:
        assert isinstance(old, AvroSchema)
        result = _CHECKER.get_compatibility(self.avro, old.avro)
        if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
            return []
        # The Python port keeps messages and locations as sets: report them per incompatibility type.
        kinds = sorted({i.name.upper() for i in result.incompatibilities})
        messages = "; ".join(sorted(result.messages))
        locations = ", ".join(sorted(result.locations))
        return [f"{{errorType:'{kind}', description:'The {labels[0]} schema cannot read data written with the "
                f"{labels[1]} schema at {locations}', additionalInfo:'{messages}'}}" for kind in kinds]


def parse_avro(text: str, references: list[ResolvedReference]) -> AvroSchema:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise invalid_schema(f"not JSON: {exc}") from None
    dependencies: list[Any] = []
    for ref in references:
        schema = ref.schema
        assert isinstance(schema, AvroSchema)
        for dep in [*schema.dependencies, schema.data]:
            if dep not in dependencies:  # a type referenced twice (directly and through another reference)
                dependencies.append(dep)
    return AvroSchema(data, dependencies)
