"""Confluent's compatibility rules per schema type and level, on real parsed schemas."""

from __future__ import annotations

import json

import pytest

from topiclake.registry.compatibility import incompatibilities
from topiclake.registry.errors import InvalidSchemaError
from topiclake.registry.formats import parse
from topiclake.registry.formats.base import ResolvedReference


def _avro(*fields) -> str:
    return json.dumps({"type": "record", "name": "User", "namespace": "t", "fields": list(fields)})


def _check(kind: str, level: str, new: str, *old: str) -> list[str]:
    previous = [(i + 1, parse(kind, text, [])) for i, text in enumerate(old)]
    return incompatibilities(level, parse(kind, new, []), previous)


def _types(messages: list[str]) -> set[str]:
    return {m.split("errorType:", 1)[1].split(",", 1)[0].strip("'\"") for m in messages if "errorType" in m}


A = {"name": "a", "type": "int"}
B_DEFAULT = {"name": "b", "type": "string", "default": "x"}
B = {"name": "b", "type": "string"}


@pytest.mark.parametrize("level, new, old, compatible", [
    ("BACKWARD", _avro(A, B_DEFAULT), _avro(A), True),   # a field added with a default
    ("BACKWARD", _avro(A, B), _avro(A), False),          # ... without one: old data lacks it
    ("FORWARD", _avro(A, B), _avro(A), True),            # old readers ignore the new field
    ("FORWARD", _avro(A), _avro(A, B), False),           # old readers need b, new data lacks it
    ("BACKWARD", _avro({"name": "a", "type": "long"}), _avro(A), True),   # int promotes to long
    ("FORWARD", _avro({"name": "a", "type": "long"}), _avro(A), False),   # long does not demote
    ("FULL", _avro(A, B_DEFAULT), _avro(A), True),
    ("FULL", _avro(A, B), _avro(A), False),
    ("NONE", _avro(B), _avro(A), True),
])
def test_avro_levels(level, new, old, compatible):
    assert (_check("AVRO", level, new, old) == []) is compatible


def test_avro_transitive_checks_every_version_and_names_the_failure():
    v1, v2, v3 = _avro(A), _avro(A, B_DEFAULT), _avro(A, B)
    assert _check("AVRO", "BACKWARD", v3, v1, v2) == []  # the latest (v2) has b
    messages = _check("AVRO", "BACKWARD_TRANSITIVE", v3, v1, v2)
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in _types(messages)
    assert "{oldSchemaVersion: 1}" in messages and "{compatibility: 'BACKWARD_TRANSITIVE'}" in messages


def _obj(props: dict, *, required=(), closed=False, **extra) -> str:
    schema = {"type": "object", "properties": props, **extra}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return json.dumps(schema)


S, I, N = {"type": "string"}, {"type": "integer"}, {"type": "number"}


@pytest.mark.parametrize("new, old, expected", [
    (_obj({"a": S, "b": I}), _obj({"a": S}), {"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"}),
    (_obj({"a": S}), _obj({"a": S, "b": I}), set()),                                 # removed from an open model
    (_obj({"a": S, "b": I}, closed=True), _obj({"a": S}, closed=True), set()),       # optional added to a closed one
    (_obj({"a": S}, closed=True), _obj({"a": S, "b": I}, closed=True), {"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"}),
    (_obj({"a": S, "b": I}, required=["b"], closed=True), _obj({"a": S}, closed=True),
     {"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"}),
    (_obj({"a": S}, required=["a"]), _obj({"a": S}), {"REQUIRED_ATTRIBUTE_ADDED"}),
    (_obj({"a": I}), _obj({"a": N}), {"TYPE_NARROWED"}),
    (_obj({"a": N}), _obj({"a": I}), set()),                                          # integer -> number widens
    (_obj({"a": S}), _obj({"a": I}), {"TYPE_CHANGED"}),
    (_obj({"a": {"type": "string", "maxLength": 5}}), _obj({"a": {"type": "string", "maxLength": 10}}),
     {"MAX_LENGTH_DECREASED"}),
    (_obj({"a": {"enum": ["x", "y", "z"]}}), _obj({"a": {"enum": ["x", "y"]}}), set()),
    (_obj({"a": {"enum": ["x"]}}), _obj({"a": {"enum": ["x", "y"]}}), {"ENUM_ARRAY_NARROWED"}),
    (_obj({"a": {"type": ["string", "null"]}}), _obj({"a": S}), set()),               # a union widens
    (_obj({"a": S}), _obj({"a": {"type": ["string", "null"]}}), {"TYPE_CHANGED"}),
    (_obj({"a": {"type": "array", "items": N}}), _obj({"a": {"type": "array", "items": I}}), set()),
])
def test_json_schema_backward(new, old, expected):
    assert _types(_check("JSON", "BACKWARD", new, old)) == expected


def test_json_schema_recursive_refs_and_forward():
    tree = {"type": "object", "properties": {"value": I, "children": {"type": "array", "items": {"$ref": "#"}}}}
    wider = json.loads(json.dumps(tree))
    wider["properties"]["value"] = N
    assert _check("JSON", "BACKWARD", json.dumps(wider), json.dumps(tree)) == []
    assert "TYPE_NARROWED" in _types(_check("JSON", "FORWARD", json.dumps(wider), json.dumps(tree)))


def test_json_schema_references_resolve_by_name_and_id():
    customer = parse("JSON", json.dumps({"$id": "http://example.com/customer.json", **json.loads(_obj({"n": S}))}), [])
    ref = ResolvedReference("customer.json", "customer", 1, customer)
    order = parse("JSON", _obj({"c": {"$ref": "customer.json"}, "d": {"$ref": "http://example.com/customer.json"}}),
                  [ref])
    assert order.backward_errors(order) == []


def _proto(body: str, package: str = "shop") -> str:
    return f'syntax = "proto3"; package {package}; {body}'


@pytest.mark.parametrize("new, old, expected", [
    (_proto("message M { string a = 1; int32 b = 2; }"), _proto("message M { string a = 1; }"), set()),
    (_proto("message M { string a = 1; }"), _proto("message M { string a = 1; int32 b = 2; }"), set()),
    (_proto("message M { string renamed = 1; }"), _proto("message M { string a = 1; }"), set()),
    (_proto("message M { int64 a = 1; }"), _proto("message M { int32 a = 1; }"), set()),
    (_proto("message M { string a = 1; }"), _proto("message M { int32 a = 1; }"), {"FIELD_SCALAR_KIND_CHANGED"}),
    (_proto("message N {} message M { N a = 1; }"), _proto("message N {} message M { int32 a = 1; }"),
     {"FIELD_KIND_CHANGED"}),
    (_proto("message M { int32 a = 1; }"), _proto("message M { int32 a = 1; } message Gone {}"), {"MESSAGE_REMOVED"}),
    (_proto("message M { int32 a = 1; }", "other"), _proto("message M { int32 a = 1; }"), {"PACKAGE_CHANGED"}),
    (_proto("message M { oneof o { int32 a = 1; string b = 2; } }"), _proto("message M { int32 a = 1; string b = 2; }"),
     {"MULTIPLE_FIELDS_MOVED_TO_ONEOF"}),
    (_proto("message M { oneof o { int32 a = 1; } string b = 2; }"), _proto("message M { int32 a = 1; string b = 2; }"),
     set()),
    (_proto("message M { optional int32 a = 1; }"), _proto("message M { int32 a = 1; }"), set()),  # not a real oneof
    (_proto("message X {} message Y {} message M { Y a = 1; }"), _proto("message X {} message Y {} message M { X a = 1; }"),
     {"FIELD_NAMED_TYPE_CHANGED"}),
    (_proto("message M { map<string, int64> m = 1; }"), _proto("message M { map<string, int32> m = 1; }"), set()),
    (_proto("message M { map<string, string> m = 1; }"), _proto("message M { map<string, int32> m = 1; }"),
     {"FIELD_SCALAR_KIND_CHANGED"}),
])
def test_protobuf_backward(new, old, expected):
    assert _types(_check("PROTOBUF", "BACKWARD", new, old)) == expected


def test_protobuf_nested_message_change_is_found_through_the_field():
    old = _proto("message Inner { int32 x = 1; } message M { Inner i = 1; }")
    new = _proto("message Inner { string x = 1; } message M { Inner i = 1; }")
    assert "FIELD_SCALAR_KIND_CHANGED" in _types(_check("PROTOBUF", "FULL", new, old))


def test_protobuf_text_and_base64_descriptor_are_the_same_schema():
    text = parse("PROTOBUF", _proto("message M { int32 a = 1; }"), [])
    serialized = parse("PROTOBUF", text.formatted("serialized"), [])
    assert serialized.normalized() == text.normalized()
    assert serialized.backward_errors(text) == []


@pytest.mark.parametrize("kind, text, reason", [
    ("AVRO", '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "array", "items": "string"}]}', "array"),
    ("AVRO", '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}', "Default value"),
    ("AVRO", "{not json", "not JSON"),
    ("JSON", '{"type": 12}', "type"),
    ("JSON", '{"properties": {"a": {"$ref": "http://nowhere.example/x.json"}}}', "does not resolve"),
    ("JSON", "[1, 2]", "object or a boolean"),
    ("PROTOBUF", 'syntax = "proto3"; message M { strin a = 1; }', '"strin" is not defined'),
    ("PROTOBUF", 'syntax = "proto3"; import "missing.proto"; message M { int32 a = 1; }', "missing.proto"),
    ("PROTOBUF", 'syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }', "already been used"),
])
def test_malformed_schemas_are_invalid(kind, text, reason):
    with pytest.raises(InvalidSchemaError) as raised:
        parse(kind, text, [])
    assert raised.value.error_code == 42201 and raised.value.http_status == 422
    assert reason in raised.value.message
