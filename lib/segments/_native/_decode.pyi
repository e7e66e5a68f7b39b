"""Types of the compiled module built from decode.c, batch_walk.c and crc32c.c (setup.py's ext_modules)."""

from collections.abc import Callable, Sequence
from typing import Any

from typing_extensions import Buffer

HARDWARE_CRC32C: bool
"""Whether this CPU has the crc32 instruction: only then may meta ask the kernel to check a CRC."""

class DecodeError(Exception):
    """Bad bytes: args are (batch_index, position, reason); position -1: a CRC mismatch."""

def decode_batches(sections: Sequence[Any], meta: Any, min_offset: int, max_offset: int,
                   allocate: Callable[[int], Buffer], /) -> dict[str, Any]: ...
def walk_plain(buf: Buffer, pos: int, end: int, budget: int, take_one: bool, check_crc: bool,
               /) -> tuple[int, bytes, bytes]: ...
def crc32c(data: Buffer, /) -> int: ...
