"""Protobuf schemas, as FileDescriptorProtos.

A schema arrives either as `.proto` text (compiled by protoc itself, from grpcio-tools) or as a
base64 FileDescriptorProto (what confluent-kafka's ProtobufSerializer registers). Either way the
file, with its imports, is loaded into a fresh `protobuf` DescriptorPool, which checks it (types
resolve, numbers are unique, ...). Imports come from the schema's references (by reference name)
or are the well-known files Confluent's registry knows without a reference (google/protobuf/*,
google/type/*, confluent/*).

The stored string is the text as registered; `?format=serialized` serves the base64 descriptor.
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib
import os
import subprocess
import sys
import tempfile
import threading

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError

from ..errors import invalid_schema
from .base import ParsedSchema, ResolvedReference
from .protobuf_diff import compare

MAIN_FILE = "schema.proto"
_PROTOC_TIMEOUT_S = 30
_WELL_KNOWN_MODULES = (
    "google.protobuf.any_pb2", "google.protobuf.api_pb2", "google.protobuf.descriptor_pb2",
    "google.protobuf.duration_pb2", "google.protobuf.empty_pb2", "google.protobuf.field_mask_pb2",
    "google.protobuf.source_context_pb2", "google.protobuf.struct_pb2", "google.protobuf.timestamp_pb2",
    "google.protobuf.type_pb2", "google.protobuf.wrappers_pb2",
    # googleapis-common-protos and confluent-kafka's own types, when installed
    "google.type.calendar_period_pb2", "google.type.color_pb2", "google.type.date_pb2", "google.type.datetime_pb2",
    "google.type.dayofweek_pb2", "google.type.expr_pb2", "google.type.fraction_pb2", "google.type.latlng_pb2",
    "google.type.money_pb2", "google.type.month_pb2", "google.type.postal_address_pb2",
    "google.type.quaternion_pb2", "google.type.timeofday_pb2",
    "confluent_kafka.schema_registry.confluent.meta_pb2",
    "confluent_kafka.schema_registry.confluent.type.decimal_pb2",
)


class ProtobufSchema(ParsedSchema):
    schema_type = "PROTOBUF"

    def __init__(self, text: str, file: descriptor_pb2.FileDescriptorProto,
                 dependencies: dict[str, descriptor_pb2.FileDescriptorProto]):
        self.canonical = text.strip()
        self.file = file
        self.dependencies = dependencies  # import name -> descriptor (references and well-known files)
        self.pool = descriptor_pool.DescriptorPool()
        added: set[str] = set()
        try:
            _add(self.pool, file, dependencies, added, ())
        except TypeError as exc:  # the pool's "Couldn't build proto file into descriptor pool: ..."
            raise invalid_schema(str(exc)) from None
        self.descriptor = self.pool.FindFileByName(file.name)

    def serialized(self) -> str:
        return base64.standard_b64encode(self.file.SerializeToString()).decode("ascii")

    def normalized(self) -> str:
        comparable = descriptor_pb2.FileDescriptorProto()
        comparable.CopyFrom(self.file)
        comparable.ClearField("name")
        comparable.ClearField("source_code_info")
        return base64.standard_b64encode(comparable.SerializeToString(deterministic=True)).decode("ascii")

    def formatted(self, fmt: str | None) -> str:
        return self.serialized() if fmt == "serialized" else self.canonical

    def backward_errors(self, old: ParsedSchema, labels: tuple[str, str] = ("new", "old")) -> list[str]:
        assert isinstance(old, ProtobufSchema)
        return compare(old, self, labels=labels)


def _add(pool, file: descriptor_pb2.FileDescriptorProto, dependencies: dict, added: set, chain: tuple) -> None:
    if file.name in added:
        return
    if file.name in chain:
        raise invalid_schema(f"import cycle: {' -> '.join((*chain, file.name))}")
    for name in file.dependency:
        dep = dependencies.get(name) or _well_known().get(name)
        if dep is None:
            raise invalid_schema(f"{file.name or 'the schema'} imports {name!r}, which is neither a reference of "
                                 "the schema nor a well-known file")
        _add(pool, dep, dependencies, added, (*chain, file.name))
    pool.AddSerializedFile(file.SerializeToString())
    added.add(file.name)


@functools.cache
def _well_known() -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The files Confluent's registry resolves without a reference."""
    files = {}
    for module_name in _WELL_KNOWN_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        files[proto.name] = proto
    return files


def parse_protobuf(text: str, references: list[ResolvedReference]) -> ProtobufSchema:
    dependencies: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for ref in references:
        schema = ref.schema
        assert isinstance(schema, ProtobufSchema)
        dependencies.update(schema.dependencies)
        named = descriptor_pb2.FileDescriptorProto()
        named.CopyFrom(schema.file)
        named.name = ref.name  # the name the importing file uses
        dependencies[ref.name] = named
    file = _from_base64(text)
    if file is None:
        file = _compile(text, dependencies)
    elif not file.name:
        file.name = MAIN_FILE
    return ProtobufSchema(text, file, dependencies)


def _from_base64(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """A serialized FileDescriptorProto in base64, or None when the text is not one."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    file = descriptor_pb2.FileDescriptorProto()
    try:
        file.ParseFromString(raw)
    except DecodeError:
        return None
    return file if (file.message_type or file.enum_type or file.package or file.syntax) else None


_compile_lock = threading.Lock()


@functools.lru_cache(maxsize=256)
def _compile_cached(text: str, dependency_set: bytes) -> bytes:
    """protoc (grpcio-tools, in a child process so its messages can be read) -> FileDescriptorSet."""
    import grpc_tools

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")  # well-known .proto files
    with tempfile.TemporaryDirectory(prefix="topiclake-protoc-") as tmp:
        with open(os.path.join(tmp, MAIN_FILE), "w", encoding="utf-8") as f:
            f.write(text)
        args = [sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={tmp}", f"--proto_path={include}",
                f"--descriptor_set_out={os.path.join(tmp, 'out.pb')}"]
        if dependency_set:
            with open(os.path.join(tmp, "deps.pb"), "wb") as f:
                f.write(dependency_set)
            args.append(f"--descriptor_set_in={os.path.join(tmp, 'deps.pb')}")
        args.append(MAIN_FILE)
        try:
            result = subprocess.run(args, capture_output=True, text=True, timeout=_PROTOC_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise invalid_schema(f"protoc did not finish within {_PROTOC_TIMEOUT_S} s") from None
        if result.returncode != 0:
            errors = (result.stderr or result.stdout).strip().replace(tmp + os.sep, "")
            raise invalid_schema(errors.splitlines()[0] if errors else f"protoc exited with {result.returncode}")
        with open(os.path.join(tmp, "out.pb"), "rb") as f:
            return f.read()


def _compile(text: str,
             dependencies: dict[str, descriptor_pb2.FileDescriptorProto]) -> descriptor_pb2.FileDescriptorProto:
    files = descriptor_pb2.FileDescriptorSet()
    for dep in dependencies.values():
        files.file.append(dep)
    with _compile_lock:
        out = _compile_cached(text, files.SerializeToString(deterministic=True))
    compiled = descriptor_pb2.FileDescriptorSet()
    compiled.ParseFromString(out)
    file = next((f for f in compiled.file if f.name == MAIN_FILE), None)
    if file is None:
        raise invalid_schema("protoc produced no descriptor for the schema")
    return file
