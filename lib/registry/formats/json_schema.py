"""JSON Schema: `jsonschema` checks the schema against its draft's meta-schema (draft 7 when it
names none), and `referencing` resolves every `$ref` — local ones and those naming a referenced
subject's schema (by the reference's name or the referenced schema's `$id`). An unresolvable
`$ref` makes the schema invalid, as it does in Confluent's registry."""

from __future__ import annotations

import json
from typing import Any, Iterator

import jsonschema
import jsonschema.exceptions
import referencing
import referencing.exceptions
import referencing.jsonschema

from ..errors import invalid_schema
from .base import ParsedSchema, ResolvedReference
from .json_diff import compare

_DEFAULT_SPEC = referencing.jsonschema.DRAFT7


class JsonSchema(ParsedSchema):
    schema_type = "JSON"

    def __init__(self, data: Any, resources: list[tuple[str, Any]]):
        if not isinstance(data, (dict, bool)):
            raise invalid_schema(f"a JSON schema is an object or a boolean, not {type(data).__name__}")
        self.data = data
        self.resources = resources  # (uri, contents) of every referenced schema, transitively
        self.canonical = json.dumps(data, separators=(",", ":"))
        validator = jsonschema.validators.validator_for(data, default=jsonschema.Draft7Validator)
        try:
            validator.check_schema(data)
        except jsonschema.exceptions.SchemaError as exc:
            raise invalid_schema(f"{exc.message} (at {'/'.join(map(str, exc.absolute_path)) or 'the root'})") from None
        registry = referencing.Registry()
        for uri, contents in resources:
            resource = referencing.Resource.from_contents(contents, default_specification=_DEFAULT_SPEC)
            registry = registry.with_resource(uri, resource)
            if resource.id():
                registry = registry.with_resource(resource.id(), resource)
        root = referencing.Resource.from_contents(data, default_specification=_DEFAULT_SPEC)
        self.resolver = registry.resolver_with_root(root)
        for ref, resolver in _refs(data, self.resolver):
            try:
                resolver.lookup(ref)
            except referencing.exceptions.Unresolvable as exc:
                raise invalid_schema(f"$ref {ref!r} does not resolve ({type(exc).__name__})") from None

    def normalized(self) -> str:
        return json.dumps(self.data, separators=(",", ":"), sort_keys=True)

    def backward_errors(self, old: ParsedSchema, labels: tuple[str, str] = ("new", "old")) -> list[str]:
        assert isinstance(old, JsonSchema)
        return compare((old.data, old.resolver), (self.data, self.resolver), labels=labels)


def _refs(schema: Any, resolver) -> Iterator[tuple[str, Any]]:
    """Every `$ref` in the schema, with the resolver scoped where it appears (nested `$id`s)."""
    if isinstance(schema, dict):
        if "$id" in schema and isinstance(schema["$id"], str):
            resolver = resolver.in_subresource(
                referencing.Resource.from_contents(schema, default_specification=_DEFAULT_SPEC))
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                yield value, resolver
            elif key not in ("enum", "const", "default", "examples"):
                yield from _refs(value, resolver)
    elif isinstance(schema, list):
        for item in schema:
            yield from _refs(item, resolver)


def parse_json(text: str, references: list[ResolvedReference]) -> JsonSchema:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise invalid_schema(f"not JSON: {exc}") from None
    resources: list[tuple[str, Any]] = []
    for ref in references:
        schema = ref.schema
        assert isinstance(schema, JsonSchema)
        for resource in [*schema.resources, (ref.name, schema.data)]:
            if resource not in resources:
                resources.append(resource)
    return JsonSchema(data, resources)
