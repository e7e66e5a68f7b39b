"""pytest plugin for ../shared/peer/run-confluent-suite (not a test module): confluent-kafka-python
2.15.0's ByoFixture (the BROKERS/SR_URL fixture) has schema_registry() but lacks
async_schema_registry(), so every _async schema-registry test fails before it reaches a registry.
This adds it as TrivupFixture has it:

    PYTHONPATH=$PWD/tests/integration SR_URL=http://HOST:PORT ../shared/peer/run-confluent-suite BROKER \
        tests/integration/schema_registry -p peer_byo_async_registry
"""
from confluent_kafka.schema_registry._async.schema_registry_client import AsyncSchemaRegistryClient
from tests.integration.cluster_fixture import ByoFixture


def _async_schema_registry(self, conf=None):
    sr_conf = {"url": self._sr_url}
    if conf is not None:
        sr_conf.update(conf)
    return AsyncSchemaRegistryClient(sr_conf)


ByoFixture.async_schema_registry = _async_schema_registry
