"""Kafka protocol code shared by the broker and the client (topiclake.client): the kio
encode/decode glue (codec), Kafka's generated-message primitive types (serde) and the consumer
protocol's subscription and assignment blobs (consumer_protocol). Imports nothing of topiclake
but segments' error types and varints."""
