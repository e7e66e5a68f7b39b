"""The error codes of the segment store's failures (broker/errors.py): each type has its code, and
the types that were split out of CorruptRecordError answer what they answered before."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from topiclake.broker.errors import error_code
from topiclake.segments.errors import CorruptRecordError, LogClosedError, OffsetOutOfRangeError, TopiclakeError


@pytest.mark.parametrize("error, code", [
    (CorruptRecordError("CRC mismatch", source="produce request", position=0), ErrorCode.corrupt_message),
    (LogClosedError("log t-0 is closed"), ErrorCode.corrupt_message),  # as when it was a CorruptRecordError
    (OffsetOutOfRangeError("offset 9 is past the log end offset 3"), ErrorCode.offset_out_of_range),
    (TopiclakeError("anything else"), ErrorCode.unknown_server_error),
])
def test_segment_failures_map_to_kafka_codes(error, code):
    assert error_code(error) == code
