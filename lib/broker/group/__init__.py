"""The consumer-group coordinator core: pure state machines over `__consumer_offsets` records.

`records` (the topic's byte layouts), `consumer_protocol` (subscription/assignment blobs),
`assignor` (range assignor), `state` + `classic` (classic-protocol groups and offsets).
"""
