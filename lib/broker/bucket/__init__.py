"""The broker on a bucket root (docs/OBJECT-STORAGE.md): a diskless broker whose local directory
is a cache that nothing trusts on start, built on topiclake.objectlog.

    settings.py  [storage] cache_dir, flush_ms, flush_bytes, seal_ms, lease_ms, delete_grace_ms
    tail.py      one partition's flushes (create-once objects, then the fence) and seals
    aborted_entries.py  the local .txnindex entries of a range, for a seal's .txnindex object
    closed.py    the closed segments below the cache, read from the bucket (Fetch, ListOffsets)
    takeover.py  a partition taken over from the bucket at a new epoch into the cache
    metadata.py  the metadata files of the root (topics, configs, cluster id) kept in the bucket
    service.py   the flush tick, the produce waiters, the lease, and stopping when fenced
    tick_schedule.py  when the next tick runs: flush_ms, or earlier for records that would wait two
"""
