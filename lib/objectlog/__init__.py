"""A partition's log in an object store (docs/OBJECT-STORAGE.md): Kafka segments as objects,
flush objects of the open segment, the manifest that says which closed segments make the log, and
the leader-epoch fence as conditional creates. It builds on topiclake.segments (the format, the
epoch rules) and topiclake.store (the bucket); the broker and the lake build on it.

    keys.py      where each object lives under log/<topic>-<p>/ and what an object name means
    manifest.py  manifest versions: created once each (If-None-Match), the newest one wins
    notices.py   a maintenance job's notice after its commit: one LIST tells a leader which manifests moved
    epochs.py    the epoch history read from leader-epochs/ objects (segments' rules, unchanged)
    plan.py      the log of a partition as pure functions over a listing: which objects, which ranges
    reader.py    the log's valid batches, read from the bucket with that plan
    fence.py     the leader-epoch fence as conditional creates: claim, seal, start, check
    flush.py     creating a flush object (retried, an identical existing object counts), then the fence
    seal.py      the tail sealed into a closed segment and a manifest commit (written by write_segment)
    aborted.py   a closed segment's aborted transactions: its .txnindex object, or a scan of it
    garbage.py   objects no manifest needs any more, deleted a grace after they stopped being needed
    merge.py     adjacent small closed segments merged into one by a maintenance manifest commit
    lease.py     single-broker ownership of a bucket root: cluster/owner.json, If-None-Match and If-Match
"""
