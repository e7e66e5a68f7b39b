"""Raw group requests over the test BrokerConnection: offset commit and fetch, and waiting for a
group's offsets partition to load."""

from __future__ import annotations

import asyncio

from kio.schema.offset_commit.v8 import request as oc8
from kio.schema.offset_fetch.v8 import request as of8

from topiclake.broker.group.errors import GroupCoordinatorError


def commit(client, group, topic, offsets):
    return client.request(oc8.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(oc8.OffsetCommitRequestTopic(name=topic, partitions=tuple(
            oc8.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                             committed_metadata="m") for p, o in offsets.items())),)))


def fetch(client, *groups, require_stable=False):
    resp = client.request(of8.OffsetFetchRequest(groups=tuple(
        of8.OffsetFetchRequestGroup(group_id=g, topics=None) for g in groups), require_stable=require_stable))
    return {g.group_id: {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}
            for g in resp.groups}


def retry(fn, timeout_s=30.0):
    """Group calls answer COORDINATOR_LOAD_IN_PROGRESS while __consumer_offsets loads (50
    partitions: seconds on a loaded CI machine)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = fn()
        if result is not None:
            return result
        time.sleep(0.05)
    raise AssertionError(f"coordinator never became available within {timeout_s} s")


def call(b, coro):
    return asyncio.run_coroutine_threadsafe(coro, b.loop).result(10)


def loaded_partition(b, group: str):
    """The group's __consumer_offsets partition, once its shard has loaded."""
    groups = b.context.groups

    async def load():
        groups.ensure_loading()
        while True:
            try:
                return groups.shard(group).partition
            except GroupCoordinatorError:
                await asyncio.sleep(0.02)

    return call(b, load())
