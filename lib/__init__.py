"""topiclake: Kafka's log, made batch-native."""

__version__ = "0.1.0"
