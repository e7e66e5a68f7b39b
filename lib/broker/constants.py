"""Protocol constants the broker's layers share, named once (Kafka's RecordBatch, MetadataResponse).

`LEADER_EPOCH` is the epoch this broker leads every partition at while it is the only broker of a
storage root. The cluster's per-partition epochs replace it: every user imports it from here, so
that change is made in one place.
"""

from __future__ import annotations

from enum import IntEnum

from topiclake.segments.batch import NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID

# One broker, never re-elected: every partition it leads is at epoch 0.
LEADER_EPOCH = 0
# A request or record that names no leader epoch (RecordBatch.NO_PARTITION_LEADER_EPOCH).
NO_LEADER_EPOCH = NO_PARTITION_LEADER_EPOCH
# *_authorized_operations when the client did not ask for them (Integer.MIN_VALUE in Kafka).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


class CoordinatorType(IntEnum):
    """What a FindCoordinator key names (FindCoordinatorRequest.CoordinatorType)."""

    GROUP = 0
    TRANSACTION = 1
    SHARE = 2  # a share-partition's state: "group:topicId:partition" (KIP-932)

__all__ = ["AUTHORIZED_OPERATIONS_OMITTED", "LEADER_EPOCH", "NO_LEADER_EPOCH", "NO_PRODUCER_EPOCH", "NO_PRODUCER_ID",
           "CoordinatorType"]
