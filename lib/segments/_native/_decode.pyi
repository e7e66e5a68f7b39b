"""Types of the compiled module built from decode.c (setup.py's ext_modules)."""

from collections.abc import Callable, Sequence
from typing import Any

from typing_extensions import Buffer

class DecodeError(Exception):
    """Bad bytes: args are (batch_index, position, reason)."""

def decode_batches(sections: Sequence[Any], meta: Any, min_offset: int, max_offset: int,
                   allocate: Callable[[int], Buffer], /) -> dict[str, Any]: ...
