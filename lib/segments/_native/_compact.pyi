"""Types of the compiled module built from compact.c (setup.py's ext_modules)."""

from typing import Any

from typing_extensions import Buffer

def md5_digests(column: tuple[Buffer | None, Buffer, Buffer, int], rows: int, /) -> bytes: ...
def encode_batches(columns: Any, rows: Any, starts: Any, base_offsets: Any, base_timestamps: Any, /) -> list[bytes]: ...
