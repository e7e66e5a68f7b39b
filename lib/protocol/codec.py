"""kio encode/decode glue shared by the broker (requests in, responses out) and the client
(requests out, responses in): the schema classes of an api key and version, cached kio readers
and writers, request frames, response decoding, and building a version-specific kio dataclass
from one description.

A frame is `size i32 | header | body`; the header version comes with kio's schema class
(`__header_schema__`), so one function per direction covers every api and version.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
from typing import Any, Callable

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from kio.serial import entity_reader, entity_writer

SIZE = struct.Struct(">i")  # the frame's size prefix


@functools.cache
def request_schema(api_key: int, api_version: int) -> type | None:
    try:
        return load_request_schema(api_key, api_version)
    except Exception:  # noqa: BLE001 - kio: UnknownAPIKey / UnknownEntity
        return None


def has_request_schema(api_key: int, api_version: int) -> bool:
    """Whether kio has the request schema, from its index alone: importing a schema module costs
    milliseconds, and a broker checking every version it serves at start would import hundreds."""
    versions = schema_name_map.get(api_key_map.get(api_key, ""), {})
    return EntityType.request in versions.get(api_version, {})


@functools.cache
def response_schema(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


@functools.cache
def reader(entity_type: type) -> Callable:
    return entity_reader(entity_type)


@functools.cache
def writer(entity_type: type) -> Callable:
    return entity_writer(entity_type)


def encode_request(correlation_id: int, body: Any, client_id: str | None = "topiclake") -> bytes:
    """A request frame with its size prefix (the client side)."""
    buf = io.BytesIO()
    header_type = body.__header_schema__
    fields = {"request_api_key": body.__api_key__, "request_api_version": body.__version__,
              "correlation_id": correlation_id, "client_id": client_id}
    writer(header_type)(buf, header_type(**fields))
    writer(type(body))(buf, body)
    data = buf.getvalue()
    return SIZE.pack(len(data)) + data


def decode_response(frame, request_body: Any) -> tuple[int, Any]:
    """(correlation_id, response) of a response frame without its size prefix."""
    schema = response_schema(request_body.__api_key__, request_body.__version__)
    header, used = reader(schema.__header_schema__)(frame, 0)
    body, _ = reader(schema)(frame, used)
    return header.correlation_id, body


def make(cls: type, **values: Any) -> Any:
    """`cls(**values)` keeping only the fields this version of the schema has.

    Handlers describe a response once, with the newest version's fields, and this trims it to the
    version the client asked for (kio has one class per version).
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)


def nested(cls: type, field_name: str) -> type:
    """The element class of a nested (array or struct) field of a kio schema class."""
    return _nested(cls, field_name)


@functools.cache
def _nested(cls: type, field_name: str) -> type:
    import typing

    hints = typing.get_type_hints(cls)
    hint = hints[field_name]
    for _ in range(3):  # unwrap tuple[X, ...] and X | None
        args = [a for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis]
        if dataclasses.is_dataclass(hint) or not args:
            break
        hint = args[0]
    if not dataclasses.is_dataclass(hint):
        raise TypeError(f"{cls.__name__}.{field_name} is not a nested schema")
    return hint
