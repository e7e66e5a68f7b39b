"""The consumer-group coordinator: pure state machines over `__consumer_offsets` records, run by
the coordinator runtime (`topiclake.broker.coordinator_runtime`) through `coordinator`.

- Records and blobs: `records`, `share_records` (the consumer protocol and serde: `topiclake.protocol`).
- Classic groups: `state`, `classic` (+ `offsets`, mixed in), `java`.
- KIP-848 consumer groups: `consumer`, `consumer_classic`, `migration`, `assignor`.
- KIP-932 share groups: `share_groups`, `share_assignor`, `share_config`.
- Shared by the modern protocols: `modern`, `recorded`; one call in progress: `op`.
- Settings and types: `config`, `group_configs`, `api`, `errors`.
"""
