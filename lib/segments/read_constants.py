"""What a reader of a partition asks for, in the numbers of Kafka's protocol: which records it may
see (Kafka's IsolationLevel, in Fetch and ListOffsets) and the special timestamps that name an
offset rather than a time (ListOffsetsRequest's constants).

The record format's own "none" values (no timestamp, no producer id, no leader epoch...) are
RecordBatch's and live beside it in `topiclake.segments.batch`.
"""

from __future__ import annotations

from enum import IntEnum


class IsolationLevel(IntEnum):
    """Fetch's and ListOffsets' isolation_level (org.apache.kafka.common.IsolationLevel)."""

    READ_UNCOMMITTED = 0  # up to the high watermark
    READ_COMMITTED = 1  # up to the last stable offset, aborted transactions' records dropped


# ListOffsets timestamps that name an offset (ListOffsetsRequest.*_TIMESTAMP); any other value >= 0
# asks for the first offset whose timestamp is at least it.
LATEST_TIMESTAMP = -1  # the log end offset (read_committed: the last stable offset)
EARLIEST_TIMESTAMP = -2  # the log start offset
MAX_TIMESTAMP = -3  # the first record holding the largest timestamp (KIP-734)
EARLIEST_LOCAL_TIMESTAMP = -4  # the first offset on local storage (KIP-405)
LATEST_TIERED_TIMESTAMP = -5  # the last offset in tiered storage (KIP-1005)
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # the first offset not yet in tiered storage (KIP-1023)

# A ListOffsets answer with no offset (ListOffsetsResponse.UNKNOWN_OFFSET).
UNKNOWN_OFFSET = -1
# The replica id of a consumer's request, i.e. no follower's (ListOffsetsRequest.CONSUMER_REPLICA_ID).
CONSUMER_REPLICA_ID = -1
