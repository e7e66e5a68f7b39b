"""Types of the compiled module built from avro.c (setup.py's ext_modules; see its module comment)."""

from typing_extensions import Buffer

def decode(program: Buffer, data: Buffer, offsets: Buffer, skip: int, /) -> tuple[
    bytes, list[tuple[int, str]], list[tuple[bytes, bytes, bytes]]]: ...
