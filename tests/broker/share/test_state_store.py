"""The share coordinator's store on a real `__share_group_state` log: updates and the periodic
snapshot, deletion, pruning, and a restart that replays the same states."""

import asyncio
import uuid
from dataclasses import replace

from topiclake.broker.partitions import PartitionManager
from topiclake.broker.group.share_config import ShareConfig
from topiclake.broker.share.persisted import PersistedState
from topiclake.broker.share.state_records import DeliveryState, ShareStateKey, StateBatch
from topiclake.broker.share.state_store import STATE_TOPIC, ShareStateStore
from topiclake.segments.storage import StorageLayout

CONFIG = ShareConfig(state_topic_partitions=1, snapshot_update_records_per_snapshot=2)
KEY = ShareStateKey("g", uuid.uuid4(), 0)
OTHER = ShareStateKey("h", uuid.uuid4(), 1)


async def open_store(root) -> tuple[PartitionManager, ShareStateStore]:
    layout = StorageLayout(root)
    for directory in (layout.cluster_dir, layout.topics_dir, layout.logs_dir):
        directory.mkdir(parents=True, exist_ok=True)
    partitions = PartitionManager(layout)
    store = ShareStateStore(partitions, CONFIG)
    await store.start()
    return partitions, store


def test_updates_snapshots_pruning_and_replay(tmp_path):
    async def main():
        partitions, store = await open_store(tmp_path)
        await store.write_snapshot(KEY, PersistedState(0, 0))
        await store.write_snapshot(OTHER, PersistedState(3, 7))
        await store.write_update(KEY, None, (StateBatch(0, 4, DeliveryState.AVAILABLE, 1),), 0)
        await store.write_update(KEY, 2, (StateBatch(2, 2, DeliveryState.ACKNOWLEDGED, 1),), 1)
        await store.write_update(KEY, 3, (StateBatch(3, 4, DeliveryState.ARCHIVED, 1),), 2)  # 3rd: a snapshot
        state = store.get(KEY)
        assert (state.start_offset, state.batches, state.snapshot_epoch) == (
            3, (StateBatch(3, 4, DeliveryState.ARCHIVED, 1),), 1)
        part = await partitions.get(STATE_TOPIC, 0)
        assert part.log.log_end_offset == 5
        await store.prune()  # OTHER's snapshot (offset 1) is the oldest record still needed
        assert part.log.log_start_offset == 1
        await store.delete([OTHER])
        await store.prune()
        assert part.log.log_start_offset == 4  # KEY's latest snapshot
        assert store.keys() == [KEY]
        await partitions.close()

        partitions, again = await open_store(tmp_path)
        assert again.keys() == [KEY]
        assert replace(again.get(KEY), write_timestamp=0) == replace(state, write_timestamp=0)
        await partitions.close()

    asyncio.run(main())
