"""topiclake.registry: a Confluent-compatible schema registry over the `_schemas` topic.

The schema store is plain Python below both the broker and the lake (it imports only
topiclake.segments): Confluent's `_schemas` record format (records.py), the replay state machine
that rebuilds the registry from those records (state.py), schema parsing and Confluent's
compatibility rules per schema type (formats/, compatibility.py), and the operations that turn a
REST call into records (service.py). The broker serves it in its own process (appending through
its partition layer); `topiclake registry start` serves it beside a broker over the Kafka
protocol (kafka_store.py); the lake replays `_schemas` straight from the segment files
(log_replay.py).
"""
