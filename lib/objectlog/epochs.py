"""The epoch history of a partition in the bucket: the same claim and start objects as a file
root's leader-epochs/ files, read into segments' EpochHistory (EpochHistory.from_names), whose
validity rule is the one every reader applies: nothing here re-implements it."""

from __future__ import annotations

from topiclake.segments.leader_epochs import EpochHistory
from topiclake.store.objects import ObjectStore

from .keys import PartitionKeys


def load_history(store: ObjectStore, keys: PartitionKeys, previous: EpochHistory | None = None) -> EpochHistory:
    """One LIST of leader-epochs/, and a GET of each start `previous` does not know yet."""
    return EpochHistory.from_names((info.key for info in store.list(keys.epochs_prefix)),
                                   lambda epoch: store.get(keys.start(epoch)), previous,
                                   source=store.root.uri(keys.epochs_prefix))

