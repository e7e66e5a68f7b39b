"""Confluent's Protobuf compatibility rules (protobuf/diff/SchemaDiff), over descriptors: walk the
old and new files' messages by name and their fields by number, record each difference, and call
the change incompatible when any difference is outside COMPATIBLE.

Incompatible: the package changed; a message removed; a field's kind changed (scalar/enum,
message, map); a scalar changed to one of another wire-compatible group (int32/int64/uint32/
uint64/bool/enum, sint32/sint64, string/bytes, fixed32/sfixed32, fixed64/sfixed64, float,
double); a field's message type changed (by name, or incompatibly); a required field added or
removed; a field removed from a oneof; several fields moved into one oneof, or a field moved into
a oneof that already existed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor as F

if TYPE_CHECKING:
    from .protobuf import ProtobufSchema

COMPATIBLE = frozenset({
    "MESSAGE_ADDED", "MESSAGE_MOVED", "ENUM_ADDED", "ENUM_REMOVED", "ENUM_CONST_ADDED", "ENUM_CONST_CHANGED",
    "ENUM_CONST_REMOVED", "FIELD_ADDED", "FIELD_REMOVED", "FIELD_NAME_CHANGED", "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
    "ONEOF_ADDED", "ONEOF_REMOVED", "ONEOF_FIELD_ADDED",
})

_DESCRIPTIONS = {
    "PACKAGE_CHANGED": "The package at '{path}' in the {a} schema does not match the package in the {b} schema",
    "MESSAGE_REMOVED": "The message at '{path}' in the {b} schema is missing in the {a} schema",
    "FIELD_KIND_CHANGED": "The kind of a field at '{path}' in the {a} schema does not match its kind in the {b} schema",
    "FIELD_SCALAR_KIND_CHANGED": "The scalar kind of a field at '{path}' in the {a} schema does not match its scalar "
                                 "kind in the {b} schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a field at '{path}' in the {a} schema does not match its type in the {b} "
                                "schema",
    "REQUIRED_FIELD_ADDED": "A required field at '{path}' in the {a} schema is missing in the {b} schema",
    "REQUIRED_FIELD_REMOVED": "A required field at '{path}' in the {b} schema is missing in the {a} schema",
    "ONEOF_FIELD_REMOVED": "A field of the oneof at '{path}' in the {b} schema is missing in the {a} schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at '{path}' in the {a} schema are outside a "
                                      "oneof in the {b} schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at '{path}' in the {a} schema is outside a oneof in the {b} "
                                     "schema, while the oneof's other fields were in a oneof",
}

_SCALAR_GROUPS = {
    F.TYPE_INT32: "GENERAL_NUMBER", F.TYPE_INT64: "GENERAL_NUMBER", F.TYPE_UINT32: "GENERAL_NUMBER",
    F.TYPE_UINT64: "GENERAL_NUMBER", F.TYPE_BOOL: "GENERAL_NUMBER", F.TYPE_ENUM: "GENERAL_NUMBER",
    F.TYPE_SINT32: "SIGNED_NUMBER", F.TYPE_SINT64: "SIGNED_NUMBER",
    F.TYPE_STRING: "STRING_OR_BYTES", F.TYPE_BYTES: "STRING_OR_BYTES",
    F.TYPE_FIXED32: "FIXED32", F.TYPE_SFIXED32: "FIXED32", F.TYPE_FIXED64: "FIXED64", F.TYPE_SFIXED64: "FIXED64",
    F.TYPE_FLOAT: "FLOAT", F.TYPE_DOUBLE: "DOUBLE",
}


def compare(old: "ProtobufSchema", new: "ProtobufSchema", *, labels: tuple[str, str] = ("new", "old")) -> list[str]:
    """Incompatibility messages for moving from `old` to `new` (each message once)."""
    ctx = _Context(visited=set())
    if old.descriptor.package != new.descriptor.package:
        ctx.add("PACKAGE_CHANGED")
    _types(ctx, old.descriptor.message_types_by_name, new.descriptor.message_types_by_name)
    out: list[str] = []
    for kind, path in ctx.differences:
        if kind in COMPATIBLE:
            continue
        text = _DESCRIPTIONS.get(kind, "A change at '{path}'").format(path=path, a=labels[0], b=labels[1])
        message = f'{{errorType:"{kind}", description:"{text}"}}'
        if message not in out:
            out.append(message)
    return out


@dataclass
class _Context:
    visited: set
    path: str = "#"
    differences: list = field(default_factory=list)

    def add(self, kind: str) -> None:
        self.differences.append((kind, self.path))

    def at(self, name) -> "_Context":
        return _Context(self.visited, f"{self.path}/{name}", self.differences)

    def sub(self) -> "_Context":
        return _Context(self.visited, self.path)

    @property
    def compatible(self) -> bool:
        return all(kind in COMPATIBLE for kind, _ in self.differences)


def _is_map_entry(message) -> bool:
    return message.GetOptions().map_entry


def _types(ctx: _Context, old: dict, new: dict) -> None:
    for name in sorted(set(old) | set(new)):
        here = ctx.at(name)
        if name not in new:
            if not _is_map_entry(old[name]):
                here.add("MESSAGE_REMOVED")
        elif name not in old:
            if not _is_map_entry(new[name]):
                here.add("MESSAGE_ADDED")
        else:
            _message(here, old[name], new[name])


def _real_oneofs(message) -> list:
    """The message's oneofs, without the synthetic ones proto3 `optional` fields live in."""
    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    synthetic = {f.oneof_index for f in proto.field if f.proto3_optional}
    return [o for i, o in enumerate(message.oneofs) if i not in synthetic]


def _message(ctx: _Context, old, new) -> None:
    guard = (old.full_name, new.full_name)
    if guard in ctx.visited:
        return  # recursive types: compared further up
    ctx.visited.add(guard)
    try:
        old_oneofs, new_oneofs = _real_oneofs(old), _real_oneofs(new)
        old_oneof_of = {f.number: o.name for o in old_oneofs for f in o.fields}
        new_oneof_of = {f.number: o.name for o in new_oneofs for f in o.fields}
        old_top = {f.number: f for f in old.fields if f.number not in old_oneof_of}
        new_top = {f.number: f for f in new.fields if f.number not in new_oneof_of}
        old_all = {f.number: f for f in old.fields}
        new_all = {f.number: f for f in new.fields}
        for oneof in new_oneofs:
            moved = sum(1 for f in oneof.fields if old_top.pop(f.number, None) is not None)
            existing = sum(1 for f in oneof.fields if f.number in old_oneof_of)
            if moved > 1:
                ctx.at(oneof.name).add("MULTIPLE_FIELDS_MOVED_TO_ONEOF")
            elif moved == 1 and existing > 0:
                ctx.at(oneof.name).add("FIELD_MOVED_TO_EXISTING_ONEOF")
        old_by_name = {o.name: o for o in old_oneofs}
        new_by_name = {o.name: o for o in new_oneofs}
        for name in sorted(set(old_by_name) | set(new_by_name)):
            if name not in new_by_name:
                ctx.at(name).add("ONEOF_REMOVED")
            elif name not in old_by_name:
                ctx.at(name).add("ONEOF_ADDED")
            else:
                _oneof(ctx.at(name), old_by_name[name], new_by_name[name], set(new_all))
        for number in sorted(set(old_top) | set(new_top)):
            here = ctx.at(number)
            if number not in new_top:
                here.add("REQUIRED_FIELD_REMOVED" if old_top[number].is_required else "FIELD_REMOVED")
            elif number not in old_top:
                here.add("REQUIRED_FIELD_ADDED" if new_top[number].is_required else "FIELD_ADDED")
            else:
                _field(here, old_top[number], new_top[number])
        for number in sorted(set(old_all) & set(new_all)):
            membership = old_oneof_of.get(number), new_oneof_of.get(number)
            if membership != (None, None) and membership[0] != membership[1]:
                _field(ctx.at(number), old_all[number], new_all[number])
        _types(ctx, old.nested_types_by_name, new.nested_types_by_name)
    finally:
        ctx.visited.discard(guard)


def _oneof(ctx: _Context, old, new, new_numbers: set[int]) -> None:
    old_fields = {f.number: f for f in old.fields}
    new_fields = {f.number: f for f in new.fields}
    for number in sorted(set(old_fields) | set(new_fields)):
        here = ctx.at(number)
        if number not in new_fields:
            if number not in new_numbers:  # moved elsewhere in the message is not a removal
                here.add("ONEOF_FIELD_REMOVED")
        elif number not in old_fields:
            here.add("ONEOF_FIELD_ADDED")
        else:
            _field(here, old_fields[number], new_fields[number])


def _field(ctx: _Context, old, new) -> None:
    if old.name != new.name:
        ctx.add("FIELD_NAME_CHANGED")
    _field_types(ctx, old, new)


def _kind(f) -> str:
    if f.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        return "MAP" if _is_map_entry(f.message_type) else "MESSAGE"
    return "SCALAR"


def _field_types(ctx: _Context, old, new) -> None:
    kind = _kind(old)
    if kind != _kind(new):
        ctx.add("FIELD_KIND_CHANGED")
    elif kind == "SCALAR":
        if _SCALAR_GROUPS.get(old.type) != _SCALAR_GROUPS.get(new.type):
            ctx.add("FIELD_SCALAR_KIND_CHANGED")
    elif kind == "MAP":
        _field_types(ctx, old.message_type.fields_by_number[1], new.message_type.fields_by_number[1])
        _field_types(ctx, old.message_type.fields_by_number[2], new.message_type.fields_by_number[2])
    elif _local_name(old.message_type) != _local_name(new.message_type):
        ctx.add("FIELD_NAMED_TYPE_CHANGED")
    else:
        sub = ctx.sub()
        _message(sub, old.message_type, new.message_type)
        ctx.differences.extend(sub.differences)
        if not sub.compatible:
            ctx.add("FIELD_NAMED_TYPE_CHANGED")


def _local_name(message) -> str:
    package = message.file.package
    return message.full_name[len(package) + 1:] if package else message.full_name
